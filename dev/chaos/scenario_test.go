package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// Scripted lifecycles: each operation's kind fixes the terminal state
// Cluster Service leads it to, whatever faults are injected on the way.
const (
	kindCreate         = "cluster create"
	kindCreateFail     = "cluster create fails"
	kindUpdate         = "cluster update"
	kindDelete         = "cluster delete"
	kindPoolCreate     = "node pool create"
	kindPoolCreateFail = "node pool create fails"
	kindPoolUpdate     = "node pool update"
	kindPoolDelete     = "node pool delete"
	// kindDeleteCreated deletes a cluster whose create in the same run
	// succeeded: it is seeded only then, so that the billing item the
	// create opened is the one the delete must close.
	kindDeleteCreated = "cluster delete after its create"
	// External auths: served as objects, pending to ready through states
	// the contract leaves unhandled; "no status" is the object without a
	// status, done at once.
	kindAuthCreate         = "external auth create"
	kindAuthCreateNoStatus = "external auth create, no status"
	kindAuthCreateFail     = "external auth create fails"
	kindAuthUpdate         = "external auth update"
	kindAuthDelete         = "external auth delete"
	// Break-glass credentials: a request issued or failed, one that a
	// revocation overtook before its first poll, and revocations over a
	// cluster's issued credentials that end revoked or failed.
	kindCredential         = "credential request"
	kindCredentialFail     = "credential request fails"
	kindCredentialOvertook = "credential request revoked"
	kindRevoke             = "credential revocation"
	kindRevokeFail         = "credential revocation fails"
	// A cluster create the 2024-10 frontend cancels: its cluster's delete
	// is requested while it installs, and that frontend writes the create
	// Canceled with no error (as2024 draws them).
	kindCreateCanceled  = "cluster create canceled by its delete"
	kindDeleteCanceling = "cluster delete canceling its create"
	// kindInstalling is a cluster installing for its whole Life: the lock
	// tests use it for an operation with exactly one change to write
	// (Accepted -> Provisioning).
	kindInstalling = "cluster installing"
)

// kindWeights is how often each kind is drawn. kindDeleteCreated is not
// drawn: half the cluster creates bring one.
var kindWeights = []struct {
	kind   string
	weight int
}{
	{kindCreate, 14}, {kindCreateFail, 6}, {kindUpdate, 8}, {kindDelete, 10},
	{kindPoolCreate, 6}, {kindPoolCreateFail, 4}, {kindPoolUpdate, 4}, {kindPoolDelete, 4},
	{kindAuthCreate, 6}, {kindAuthCreateNoStatus, 3}, {kindAuthCreateFail, 3}, {kindAuthUpdate, 5}, {kindAuthDelete, 5},
	{kindCredential, 6}, {kindCredentialFail, 3}, {kindCredentialOvertook, 2}, {kindRevoke, 7}, {kindRevokeFail, 4},
}

// chaosTenant is the tenantId of every seeded operation, which a billing
// item copies.
const chaosTenant = "72f988bf-0000-4000-8000-00000000c4a0"

const (
	cmAPI  = "/api/clusters_mgmt/v1/clusters/"
	hcpAPI = "/api/aro_hcp/v1alpha1/clusters/"
)

// resourceItem is a Resources item the scenario writes.
type resourceItem struct {
	ID, Key, InternalID string
	// Active is the operation id in activeOperationId, empty for none.
	Active string
	State  string
	// Removed: a finished delete must remove the item.
	Removed bool
}

// op is one operation with its scripted lifecycle and what it must end in.
type op struct {
	Sub, ID, Kind string
	Request       string // Create, Update, Delete, RequestCredential or RevokeCredentials
	Start         string // the status the frontend wrote
	Want          string // the terminal status the lifecycle implies
	WantCode      string // the error code of a Failed or Canceled operation
	Cluster, Pool string // simulator ids; Pool empty for a cluster
	Auth          string // the external auth's simulator id, for its operations
	Credential    string // the credential's simulator id, for a request
	API           string // the cluster's Cluster Service path prefix
	Life          time.Duration
	Failure       string // the simulated failure's message
	// After is the operation whose success this one waits for: it is
	// seeded only once that one is Succeeded and notified, or, with
	// Cancels, once it is Provisioning (the delete cancels it).
	After   string
	Cancels bool
	// Billed: the cluster has an open billing item from before the run
	// (ARO-HCP's backend gave it a random id), and a closed one from an
	// earlier life when OldBill is set.
	Billed, OldBill bool
	// Aro2024 makes the request to the 2024-10 frontend stand-in: ID and
	// Items[0].ID are UUIDs, the cluster and node pools clusters_mgmt's,
	// and the items are that frontend's (see as2024).
	Aro2024 bool
	// Items are the Resources items of the operation: its own (first,
	// except for credentials, which have none), then the node pools of a
	// deleted cluster (removed with it), or the parent cluster and sibling
	// node pools or external auths (kept).
	Items []resourceItem
}

func (o op) key() string {
	k := o.clusterKey()
	switch {
	case o.Pool != "":
		k += "/nodePools/" + o.Pool
	case o.Auth != "":
		k += "/externalAuths/" + o.Auth
	}
	return k
}

func (o op) clusterKey() string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/rg-chaos/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/%s", o.Sub, o.Cluster)
}

func (o op) internalID() string {
	switch {
	case o.Pool != "" && o.Aro2024:
		return cmAPI + o.Cluster + "/node_pools/" + o.Pool
	case o.Pool != "":
		return hcpAPI + o.Cluster + "/node_pools/" + o.Pool
	case o.Auth != "":
		return hcpAPI + o.Cluster + "/external_auth_config/external_auths/" + o.Auth
	case o.Credential != "":
		return cmAPI + o.Cluster + "/break_glass_credentials/" + o.Credential
	}
	return o.API + o.Cluster
}

// ownsItem reports whether Items[0] is the operation's own Resources item:
// credential requests and revocations have none.
func (o op) ownsItem() bool {
	return o.Request != "RequestCredential" && o.Request != "RevokeCredentials"
}

// clusterOnly reports whether the operation is on the cluster itself,
// which is what billing follows.
func (o op) clusterOnly() bool {
	return o.Pool == "" && o.Auth == "" && o.ownsItem()
}

// installingOp is an operation whose cluster installs for an hour: its only
// change is Accepted -> Provisioning.
func installingOp(sub, id string) op {
	o := op{Sub: sub, ID: id, Kind: kindInstalling, Request: "Create", Start: "Accepted", Want: "Provisioning",
		Cluster: "c-" + id, API: hcpAPI, Life: time.Hour}
	o.Items = []resourceItem{{ID: "r-" + id, Key: o.key(), InternalID: o.internalID(), Active: id, State: o.Start}}
	return o
}

// subscriptions returns n subscription ids.
func subscriptions(n int, tag string) []string {
	subs := make([]string, n)
	for i := range subs {
		subs[i] = fmt.Sprintf("%08x-%04x-4000-8000-%012d", 0xc4a05000+i, len(tag), i+1)
	}
	return subs
}

// scenario draws n operations over subs, each with a lifecycle that ends
// between minLife and maxLife after it is seeded. prefix keeps ids unique
// across scenarios sharing a simulator. Half the cluster creates are
// followed by a delete of the cluster (After), whose lifecycle is at most
// half as long.
func scenario(rng *rand.Rand, subs []string, n int, minLife, maxLife time.Duration, prefix string) []op {
	total := 0
	for _, w := range kindWeights {
		total += w.weight
	}
	ops := make([]op, 0, n)
	for len(ops) < n {
		i := len(ops)
		u := rng.IntN(total)
		kind := kindWeights[0].kind
		for _, w := range kindWeights {
			if u < w.weight {
				kind = w.kind
				break
			}
			u -= w.weight
		}
		o := op{
			Sub:     subs[i%len(subs)],
			ID:      fmt.Sprintf("%s-op-%04d", prefix, i),
			Kind:    kind,
			Cluster: fmt.Sprintf("%s-c%04d", prefix, i),
			API:     []string{cmAPI, hcpAPI}[rng.IntN(2)],
			Life:    minLife + time.Duration(rng.Int64N(int64(maxLife-minLife)+1)),
			Start:   "Accepted",
			Want:    "Succeeded",
		}
		switch kind {
		case kindCreate:
			o.Request = "Create"
		case kindCreateFail:
			o.Request, o.Want = "Create", "Failed"
			o.WantCode = fmt.Sprintf("OCM%04d", 3000+rng.IntN(20))
			o.Failure = "quota exceeded in eastus (scripted)"
		case kindUpdate:
			o.Request = "Update"
		case kindDelete:
			o.Request = "Delete"
			o.Start = []string{"Accepted", "Deleting"}[rng.IntN(2)]
			o.Billed, o.OldBill = rng.IntN(2) == 0, rng.IntN(4) == 0
			o.OldBill = o.OldBill && o.Billed
		case kindPoolCreate:
			o.Request, o.Pool = "Create", "np0"
		case kindPoolCreateFail:
			o.Request, o.Pool, o.Want = "Create", "np0", "Failed"
			o.WantCode = "InternalServerError"
			o.Failure = "no capacity for Standard_NC24ads_A100_v4 (scripted)"
		case kindPoolUpdate:
			o.Request, o.Pool = "Update", "np0"
		case kindPoolDelete:
			o.Request, o.Pool = "Delete", "np0"
			o.Start = []string{"Accepted", "Deleting"}[rng.IntN(2)]
		case kindAuthCreate, kindAuthCreateNoStatus:
			o.Request, o.Auth = "Create", "ea0"
		case kindAuthCreateFail:
			o.Request, o.Auth, o.Want = "Create", "ea0", "Failed"
			o.WantCode = "InternalServerError"
			o.Failure = "issuer https://login.example.invalid unreachable (scripted)"
		case kindAuthUpdate:
			o.Request, o.Auth = "Update", "ea0"
		case kindAuthDelete:
			o.Request, o.Auth = "Delete", "ea0"
			o.Start = []string{"Accepted", "Deleting"}[rng.IntN(2)]
		case kindCredential:
			o.Request, o.Credential = "RequestCredential", "bgc0"
		case kindCredentialFail:
			o.Request, o.Credential, o.Want = "RequestCredential", "bgc0", "Failed"
			o.WantCode = "InternalServerError"
		case kindCredentialOvertook:
			o.Request, o.Credential, o.Want = "RequestCredential", "bgc0", "Canceled"
			o.WantCode = "Canceled"
		case kindRevoke:
			o.Request = "RevokeCredentials"
		case kindRevokeFail:
			o.Request, o.Want = "RevokeCredentials", "Failed"
			o.WantCode = "InternalServerError"
		}
		if o.ownsItem() {
			o.Items = append(o.Items, resourceItem{ID: "r-" + o.ID, Key: o.key(), InternalID: o.internalID(), Active: o.ID,
				State: o.Start, Removed: o.Request == "Delete"})
		}
		switch {
		case kind == kindDelete:
			// The cluster's node pools go with it.
			for j := range rng.IntN(4) {
				np := fmt.Sprintf("np%d", j)
				o.Items = append(o.Items, resourceItem{ID: fmt.Sprintf("r-%s-np%d", o.ID, j), Key: o.clusterKey() + "/nodePools/" + np,
					InternalID: hcpAPI + o.Cluster + "/node_pools/" + np, State: "Succeeded", Removed: true})
			}
		case o.Pool != "":
			// The parent cluster and a sibling node pool stay, whatever
			// happens to this node pool.
			o.Items = append(o.Items,
				resourceItem{ID: "r-" + o.ID + "-parent", Key: o.clusterKey(), InternalID: o.API + o.Cluster, State: "Succeeded"},
				resourceItem{ID: "r-" + o.ID + "-sibling", Key: o.clusterKey() + "/nodePools/sibling",
					InternalID: hcpAPI + o.Cluster + "/node_pools/sibling", State: "Succeeded"})
		case o.Auth != "":
			// The parent cluster and a sibling external auth whose key
			// starts with this one's stay, whatever happens to it.
			o.Items = append(o.Items,
				resourceItem{ID: "r-" + o.ID + "-parent", Key: o.clusterKey(), InternalID: o.API + o.Cluster, State: "Succeeded"},
				resourceItem{ID: "r-" + o.ID + "-sibling", Key: o.key() + "-sibling",
					InternalID: o.internalID() + "-sibling", State: "Succeeded"})
		case !o.ownsItem():
			// Credentials have no Resources item: the cluster's stays as
			// it was.
			o.Items = append(o.Items, resourceItem{ID: "r-" + o.ID + "-cluster", Key: o.clusterKey(),
				InternalID: o.API + o.Cluster, State: "Succeeded"})
		default:
			// A node pool of the cluster stays through the cluster's create
			// or update.
			o.Items = append(o.Items, resourceItem{ID: "r-" + o.ID + "-np", Key: o.clusterKey() + "/nodePools/workers",
				InternalID: hcpAPI + o.Cluster + "/node_pools/workers", State: "Succeeded"})
		}
		ops = append(ops, o)
		if kind == kindCreate && len(ops) < n && rng.IntN(2) == 0 {
			ops = append(ops, deleteAfter(o, fmt.Sprintf("%s-op-%04d", prefix, len(ops)),
				minLife+time.Duration(rng.Int64N(int64(maxLife-minLife)/2+1)), []string{"Accepted", "Deleting"}[rng.IntN(2)]))
		}
	}
	return ops
}

// deleteAfter is the delete of create's cluster, seeded once create has
// succeeded: it removes the items the create left.
func deleteAfter(create op, id string, life time.Duration, start string) op {
	d := create
	d.ID, d.Kind, d.Request, d.Start, d.Life, d.After = id, kindDeleteCreated, "Delete", start, life, create.ID
	d.Items = nil
	for i, it := range create.Items {
		it.Removed = true
		if i == 0 {
			it.Active, it.State = id, start
		}
		d.Items = append(d.Items, it)
	}
	return d
}

// as2024 makes about share of the cluster and node pool operations of ops
// (and the follow-up deletes of those creates) requests to the 2024-10
// frontend stand-in: new UUIDs for the operation and its own Resources
// item, clusters_mgmt internalIds for the cluster and every node pool, a
// delete Deleting from the start. A quarter of the converted creates with
// no follow-up become creates that the delete appended for each cancels.
// ops must run with every Operations item in "workaround".
func as2024(rng *rand.Rand, ops []op, share float64) []op {
	followed := map[string]bool{}
	for _, o := range ops {
		if o.After != "" {
			followed[o.After] = true
		}
	}
	uuid := func() string { return frontend.NewUUID(rngReader{rng}) }
	renamed := map[string]string{} // a converted create's old id: its new one
	itemIDs := map[string]string{}
	for i := range ops {
		o := &ops[i]
		switch {
		case o.After != "":
			id, ok := renamed[o.After]
			if !ok {
				continue
			}
			o.After = id
		case !slices.Contains([]string{kindCreate, kindCreateFail, kindUpdate, kindDelete,
			kindPoolCreate, kindPoolCreateFail, kindPoolUpdate, kindPoolDelete}, o.Kind) || rng.Float64() >= share:
			continue
		}
		old := o.ID
		o.ID, o.Aro2024, o.API = uuid(), true, cmAPI
		renamed[old] = o.ID
		if o.Request == "Delete" {
			o.Start = "Deleting"
		}
		for j := range o.Items {
			it := &o.Items[j]
			it.InternalID = strings.Replace(it.InternalID, hcpAPI, cmAPI, 1)
			if j > 0 {
				continue
			}
			if _, ok := itemIDs[it.ID]; !ok {
				itemIDs[it.ID] = uuid()
			}
			it.ID, it.Active, it.State = itemIDs[it.ID], o.ID, o.Start
		}
		if o.Kind == kindCreate && !followed[old] && rng.IntN(4) == 0 {
			d := deleteAfter(*o, uuid(), o.Life/2, "Deleting")
			d.Kind, d.Cancels = kindDeleteCanceling, true
			o.Kind, o.Want = kindCreateCanceled, "Canceled"
			ops = append(ops, d)
		}
	}
	return ops
}

// rngReader reads bytes from a math/rand source, so that a seed draws the
// same UUIDs.
type rngReader struct{ r *rand.Rand }

func (r rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}

// chaosSystemData is the systemData ARM sends with the 2024-10 requests:
// opstatus must keep it.
var chaosSystemData = &frontend.SystemData{CreatedBy: "chaos@example.com", CreatedByType: "User",
	LastModifiedBy: "chaos@example.com", LastModifiedByType: "User"}

// request2024 makes o's request to the 2024-10 frontend stand-in, as ARM
// does: again after a 409 (its lock was busy for the Locks TTL).
func request2024(ctx context.Context, fe *frontend.Frontend, o op, armURL string) error {
	method := map[string]string{"Create": http.MethodPut, "Update": http.MethodPut, "Delete": http.MethodDelete}[o.Request]
	internalID := o.internalID()
	if o.Pool != "" {
		internalID = "" // its cluster's + /node_pools/{name}
	}
	for end := time.Now().Add(2 * time.Minute); ; {
		r, err := fe.Request(ctx, frontend.Request{Method: method, Key: o.key(), InternalID: internalID,
			TenantID: chaosTenant, NotificationURI: armURL + "/notify/" + o.ID, SystemData: chaosSystemData,
			OperationID: o.ID, ItemID: o.Items[0].ID})
		var re *frontend.RequestError
		switch {
		case errors.As(err, &re) && re.Status == http.StatusConflict && time.Now().Before(end):
			if !testenv.Sleep(ctx, 500*time.Millisecond) {
				return ctx.Err()
			}
			continue
		case err != nil:
			return err
		case r.Request != o.Request || r.Resource != o.Items[0].ID:
			return fmt.Errorf("the frontend served a %s of item %s, not a %s of %s", r.Request, r.Resource, o.Request, o.Items[0].ID)
		case o.Cancels && r.Canceled != o.After:
			return fmt.Errorf("the delete canceled %q, not its create %s", r.Canceled, o.After)
		}
		return nil
	}
}

// withoutFollowUps returns ops without the operations that wait for
// another's success.
func withoutFollowUps(ops []op) []op {
	return slices.DeleteFunc(slices.Clone(ops), func(o op) bool { return o.After != "" })
}

// simulate registers o's lifecycle in the simulator.
func (o op) simulate(sim *clustersim.Sim) error {
	d := func(f float64) clustersim.Duration { return clustersim.Duration(time.Duration(float64(o.Life) * f)) }
	ready := clustersim.Script{}
	api := clustersim.APIBoth
	switch o.Kind {
	case kindCreate, kindCreateFail:
		return sim.AddCluster(o.Cluster, clustersim.Script{Pending: d(0.15), Validating: d(0.15), Installing: d(0.7), API: api,
			Fail: o.Kind == kindCreateFail, ErrorCode: o.WantCode, ErrorMessage: o.Failure})
	case kindInstalling:
		return sim.AddCluster(o.Cluster, clustersim.Script{Installing: d(1), API: api})
	case kindCreateCanceled:
		return sim.AddCluster(o.Cluster, clustersim.Script{Pending: d(0.15), Validating: d(0.15), Installing: clustersim.Duration(time.Hour), API: api})
	case kindUpdate:
		if err := sim.AddCluster(o.Cluster, ready); err != nil {
			return err
		}
		return sim.UpdateCluster(o.Cluster, o.Life)
	case kindDelete:
		if err := sim.AddCluster(o.Cluster, ready); err != nil {
			return err
		}
		for _, it := range o.Items[1:] {
			np := it.Key[strings.LastIndex(it.Key, "/")+1:]
			if err := sim.AddNodePool(o.Cluster, np, ready); err != nil {
				return err
			}
		}
		return sim.DeleteCluster(o.Cluster, o.Life)
	case kindDeleteCreated, kindDeleteCanceling:
		// The create left the cluster ready, or installing.
		return sim.DeleteCluster(o.Cluster, o.Life)
	}
	if err := sim.AddCluster(o.Cluster, ready); err != nil {
		return err
	}
	switch o.Kind {
	case kindAuthCreate, kindAuthCreateFail:
		return sim.AddExternalAuth(o.Cluster, o.Auth, clustersim.Script{Pending: d(0.2), Installing: d(0.8),
			Fail: o.Kind == kindAuthCreateFail, ErrorMessage: o.Failure})
	case kindAuthCreateNoStatus:
		return sim.AddExternalAuth(o.Cluster, o.Auth, clustersim.Script{NoStatus: true})
	case kindAuthUpdate:
		if err := sim.AddExternalAuth(o.Cluster, o.Auth, ready); err != nil {
			return err
		}
		return sim.UpdateExternalAuth(o.Cluster, o.Auth, o.Life)
	case kindAuthDelete:
		if err := sim.AddExternalAuth(o.Cluster, o.Auth, ready); err != nil {
			return err
		}
		return sim.DeleteExternalAuth(o.Cluster, o.Auth, o.Life)
	case kindCredential, kindCredentialFail:
		return sim.AddCredential(o.Cluster, o.Credential, clustersim.Script{Issuing: d(1), Fail: o.Kind == kindCredentialFail})
	case kindCredentialOvertook:
		if err := sim.AddCredential(o.Cluster, o.Credential, clustersim.Script{Issuing: d(1)}); err != nil {
			return err
		}
		return sim.RevokeCredential(o.Cluster, o.Credential, o.Life)
	case kindRevoke, kindRevokeFail:
		// One to three issued credentials, and one that has expired and so
		// counts as revoked; the revocation reaches the issued ones at once
		// and ends after Life.
		if err := sim.AddCredential(o.Cluster, "bgc-expired", clustersim.Script{ExpiresIn: clustersim.Duration(time.Nanosecond)}); err != nil {
			return err
		}
		for j := range 1 + int(o.Life%3) {
			if err := sim.AddCredential(o.Cluster, fmt.Sprintf("bgc%d", j), clustersim.Script{RevokeFail: o.Kind == kindRevokeFail}); err != nil {
				return err
			}
		}
		_, err := sim.RevokeCredentials(o.Cluster, o.Life)
		return err
	case kindPoolCreate, kindPoolCreateFail:
		return sim.AddNodePool(o.Cluster, o.Pool, clustersim.Script{Pending: d(0.2), Installing: d(0.8),
			Fail: o.Kind == kindPoolCreateFail, ErrorMessage: o.Failure})
	case kindPoolUpdate:
		if err := sim.AddNodePool(o.Cluster, o.Pool, ready); err != nil {
			return err
		}
		return sim.UpdateNodePool(o.Cluster, o.Pool, o.Life)
	case kindPoolDelete:
		if err := sim.AddNodePool(o.Cluster, o.Pool, ready); err != nil {
			return err
		}
		return sim.DeleteNodePool(o.Cluster, o.Pool, o.Life)
	}
	return fmt.Errorf("unknown kind %q", o.Kind)
}

// seedOps registers every lifecycle in the simulator and makes each
// operation's request as the frontend does (seedBefore, then request),
// straight to Cosmos: not through the proxy, whose write log then holds
// only opstatus's data writes and the lock actor's. Operations that wait
// for another (After) are left to followUps.
func seedOps(ctx context.Context, e *env, ops []op) error {
	work := make(chan op)
	errs := make(chan error, len(ops))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := seedOne(ctx, e, o); err != nil {
					errs <- fmt.Errorf("seed %s: %w", o.ID, err)
				}
			}
		})
	}
	for _, o := range ops {
		if o.After == "" {
			work <- o
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

func seedOne(ctx context.Context, e *env, o op) error {
	if err := seedBefore(ctx, e, o); err != nil {
		return err
	}
	if o.Aro2024 {
		return request2024(ctx, e.fe2024, o, e.s.ARMURL)
	}
	return request(ctx, e.s.Frontend, o, e.s.ARMURL)
}

// seedBefore writes what stands before o's request: its lifecycle in the
// simulator (the frontend's call to Cluster Service), the billing items
// ARO-HCP's backend wrote, and the Resources items the request does not
// write (parent, siblings, children), and, for an Update or a Delete, its
// own item as the previous operation left it.
func seedBefore(ctx context.Context, e *env, o op) error {
	if err := o.simulate(e.s.Sim); err != nil {
		return err
	}
	if o.Billed {
		if err := e.db.putBilling(ctx, openBill(o)); err != nil {
			return err
		}
	}
	if o.OldBill {
		if err := e.db.putBilling(ctx, oldBill(o)); err != nil {
			return err
		}
	}
	for i, it := range o.Items {
		if i == 0 && o.ownsItem() {
			// A create writes its own item; a canceling delete finds
			// it as the create left it.
			if o.Request == "Create" || o.Cancels {
				continue
			}
			it.Active, it.State = "", "Succeeded"
		}
		if err := e.s.Frontend.PutResource(ctx, resourceOf(o, it)); err != nil {
			return err
		}
	}
	return nil
}

// request makes o's request as ARO-HCP's frontend (2024-10) does: holding
// the subscription lock (waited for while someone else holds it), it
// writes the operation (StartOperation), then its own Resources item
// (CreateResourceDoc, UpdateResourceDoc), then releases the lock. pickup
// wakes on the operation's write and may read before the second.
func request(ctx context.Context, fe *frontend.Frontend, o op, armURL string) error {
	ctx = database.WithOwner(ctx, frontendOwner)
	l, err := waitLock(ctx, fe, o.Sub)
	if err != nil {
		return err
	}
	err = writeRequest(ctx, fe, o, armURL, nil)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return errors.Join(err, fe.Unlock(uctx, l))
}

// waitLock takes sub's lock for the frontend, trying again while someone
// else holds it, for at most a minute.
func waitLock(ctx context.Context, fe *frontend.Frontend, sub string) (frontend.Lock, error) {
	for end := time.Now().Add(time.Minute); ; {
		l, ok, err := fe.TryLock(ctx, sub, frontendOwner)
		switch {
		case err != nil:
			return l, err
		case ok:
			return l, nil
		case time.Now().After(end):
			return l, fmt.Errorf("subscription %s: lock held for a minute", sub)
		case !testenv.Sleep(ctx, 50*time.Millisecond):
			return l, ctx.Err()
		}
	}
}

// writeRequest writes, under the lock the caller holds, o's operation,
// then its own Resources item; work, when set, runs between the two (a
// slow request).
func writeRequest(ctx context.Context, fe *frontend.Frontend, o op, armURL string, work func()) error {
	now := time.Now().UTC()
	if err := fe.PutOperation(ctx, frontend.Operation{
		ID: o.ID, PartitionKey: o.Sub, TenantID: chaosTenant, Request: o.Request, Status: o.Start,
		ExternalID: o.key(), InternalID: o.internalID(), StartTime: now, LastTransitionTime: now,
		OperationID:     "/subscriptions/" + o.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + o.ID,
		NotificationURI: armURL + "/notify/" + o.ID,
		Extra:           map[string]any{"chaosTag": o.ID},
	}); err != nil {
		return err
	}
	if work != nil {
		work()
	}
	if !o.ownsItem() {
		return nil
	}
	return fe.PutResource(ctx, resourceOf(o, o.Items[0]))
}

// resourceOf is the Resources item it of o as the frontend writes it.
func resourceOf(o op, it resourceItem) frontend.Resource {
	return frontend.Resource{
		ID: it.ID, PartitionKey: o.Sub, Key: it.Key, InternalID: it.InternalID,
		ActiveOperationID: it.Active, ProvisioningState: it.State,
		Extra: map[string]any{"chaosTag": it.ID},
	}
}

// The lives of clusters billed before the run: the current one since
// billedSince, and an earlier one that ended at oldBillEnd.
var (
	billedSince  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	oldBillStart = time.Date(2024, 11, 1, 12, 0, 0, 0, time.UTC)
	oldBillEnd   = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// openBill is the open billing item of a cluster created before the run,
// as ARO-HCP's backend wrote it (an id of its own, not opstatus's).
func openBill(o op) item {
	return item{"id": "b-" + o.ID, "subscriptionId": strings.ToLower(o.Sub), "resourceId": o.clusterKey(),
		"tenantId": chaosTenant, "location": stack.Location, "creationTime": billedSince.Format(time.RFC3339Nano),
		"managedResourceGroup": managedResourceGroup(o), "chaosTag": "b-" + o.ID}
}

// oldBill is the closed billing item of an earlier life of the cluster,
// which nothing may change.
func oldBill(o op) item {
	b := openBill(o)
	b["id"], b["chaosTag"] = "b-old-"+o.ID, "b-old-"+o.ID
	b["creationTime"], b["deletionTime"] = oldBillStart.Format(time.RFC3339Nano), oldBillEnd.Format(time.RFC3339Nano)
	return b
}

// managedResourceGroup is what a billing item of o's cluster records: the
// simulator names a cluster's managed resource group "{id}-managed".
func managedResourceGroup(o op) string {
	return "/subscriptions/" + o.Sub + "/resourceGroups/" + o.Cluster + "-managed"
}

// followUps seeds the operations that wait for another's success (After)
// once it has succeeded and been notified, as the frontend accepts a
// delete of a cluster only once its create is over.
type followUps struct {
	e       *env
	pending []op
	// created is the creation_timestamp of each cluster a follow-up
	// deletes, read before the delete: billing checks it after the
	// simulator has forgotten the cluster.
	created map[string]time.Time
}

func newFollowUps(e *env, ops []op) *followUps {
	f := &followUps{e: e, created: map[string]time.Time{}}
	for _, o := range ops {
		if o.After != "" {
			f.pending = append(f.pending, o)
		}
	}
	return f
}

// seedReady seeds the pending operations whose predecessor items show
// done.
func (f *followUps) seedReady(ctx context.Context, items map[string]item) error {
	var left []op
	for _, o := range f.pending {
		prev := items[o.After]
		waiting := prev == nil || prev.str("status") != "Succeeded" || prev.str("notificationUri") != ""
		if o.Cancels {
			waiting = prev == nil || prev.str("status") != "Provisioning"
		}
		if waiting {
			left = append(left, o)
			continue
		}
		c, err := f.e.s.Sim.Cluster(o.Cluster)
		if err != nil {
			return fmt.Errorf("follow-up %s: %w", o.ID, err)
		}
		f.created[o.Cluster] = c.CreationTimestamp
		if err := seedOne(ctx, f.e, o); err != nil {
			return fmt.Errorf("seed %s: %w", o.ID, err)
		}
	}
	f.pending = left
	return nil
}

// terminal reports whether status is terminal.
func terminal(status string) bool {
	return status == "Succeeded" || status == "Failed" || status == "Canceled"
}

// settled reports whether every operation is terminal with its
// notification sent (notificationUri cleared), and how many are not.
func settled(items map[string]item, ops []op) (bool, int) {
	left := 0
	for _, o := range ops {
		it := items[o.ID]
		if it == nil || !terminal(it.str("status")) || it.str("notificationUri") != "" {
			left++
		}
	}
	return left == 0, left
}

// checkOutcome compares the final items with what the lifecycles imply and
// returns every mismatch: operation status and error code, unknown fields
// kept, notificationUri cleared, Resources items removed exactly for the
// finished deletes, and every other item at its operation's final state
// with activeOperationId cleared. Items a follow-up delete removes are
// judged by it, not by the operation before it.
func checkOutcome(ops []op, opItems, resItems map[string]item) []string {
	var bad []string
	expected := map[string]bool{}
	followed := map[string]bool{}
	for _, o := range ops {
		if o.After != "" {
			followed[o.After] = true
		}
	}
	for _, o := range ops {
		it := opItems[o.ID]
		if it == nil {
			bad = append(bad, fmt.Sprintf("%s (%s): operation item missing", o.ID, o.Kind))
			continue
		}
		st := it.str("status")
		if st != o.Want {
			bad = append(bad, fmt.Sprintf("%s (%s): status %q, want %q", o.ID, o.Kind, st, o.Want))
		}
		switch {
		case o.Kind == kindCreateCanceled:
			// The 2024-10 frontend's Canceled has no error, and opstatus
			// adds none to the item (ARM's notification gets one).
			if it["error"] != nil {
				bad = append(bad, fmt.Sprintf("%s (%s): error %v in the frontend's Canceled", o.ID, o.Kind, it["error"]))
			}
		case o.Want == "Failed" || o.Want == "Canceled":
			code, msg := "", ""
			if e, ok := it["error"].(map[string]any); ok {
				code, _ = e["code"].(string)
				msg, _ = e["message"].(string)
			}
			if code != o.WantCode {
				bad = append(bad, fmt.Sprintf("%s (%s): error code %q, want %q", o.ID, o.Kind, code, o.WantCode))
			}
			if msg == "" {
				bad = append(bad, fmt.Sprintf("%s (%s): %s without an error message", o.ID, o.Kind, st))
			}
		}
		if !o.Aro2024 && it.str("chaosTag") != o.ID {
			bad = append(bad, fmt.Sprintf("%s: the frontend's unknown field was lost", o.ID))
		}
		if it.str("notificationUri") != "" {
			bad = append(bad, fmt.Sprintf("%s: notificationUri not cleared", o.ID))
		}
		for i, ri := range o.Items {
			expected[ri.ID] = true
			if followed[o.ID] {
				continue
			}
			r := resItems[ri.ID]
			switch {
			case ri.Removed && o.Want == "Succeeded":
				if r != nil {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s not removed by the finished delete", o.ID, o.Kind, ri.ID))
				}
			case r == nil:
				bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s was removed", o.ID, o.Kind, ri.ID))
			case i == 0 && o.Aro2024:
				// The 2024-10 frontend's item carries no field opstatus
				// does not know; its systemData must survive.
				if r["systemData"] == nil {
					bad = append(bad, fmt.Sprintf("%s: Resources item %s lost its systemData", o.ID, ri.ID))
				}
				if ps := r.str("provisioningState"); ps != st {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s shows %q, its operation ended %q", o.ID, o.Kind, ri.ID, ps, st))
				}
				if a := r.str("activeOperationId"); a != "" {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s still has activeOperationId %q", o.ID, o.Kind, ri.ID, a))
				}
			case r.str("chaosTag") != ri.ID:
				bad = append(bad, fmt.Sprintf("%s: Resources item %s lost the frontend's unknown field", o.ID, ri.ID))
			case i == 0 && o.ownsItem():
				if ps := r.str("provisioningState"); ps != st {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s shows %q, its operation ended %q", o.ID, o.Kind, ri.ID, ps, st))
				}
				if a := r.str("activeOperationId"); a != "" {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s still has activeOperationId %q", o.ID, o.Kind, ri.ID, a))
				}
			default:
				if ps := r.str("provisioningState"); ps != ri.State {
					bad = append(bad, fmt.Sprintf("%s (%s): bystander Resources item %s changed to %q", o.ID, o.Kind, ri.ID, ps))
				}
			}
		}
	}
	for id := range resItems {
		if !expected[id] {
			bad = append(bad, fmt.Sprintf("unexpected Resources item %s", id))
		}
	}
	slices.Sort(bad)
	return bad
}

// countKinds counts operations by kind, for the report.
func countKinds(ops []op) map[string]int {
	out := map[string]int{}
	for _, o := range ops {
		out[o.Kind]++
	}
	return out
}
