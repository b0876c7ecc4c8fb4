package frontend

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/internal/testenv"
)

// Request is one asynchronous ARM request to the frontend: a PUT or PATCH
// of a cluster or node pool, or a DELETE. Request serves it as ARO-HCP's
// frontend at 07deb7918 did, after its call to Cluster Service, which the
// caller makes (sets up in the simulator) itself.
type Request struct {
	// Method is http.MethodPut (a create, or an update of an existing
	// resource), http.MethodPatch (an update) or http.MethodDelete.
	Method string
	// Key is the ARM resource ID as the request URL spells it.
	Key string
	// InternalID is the href Cluster Service answered a cluster's create
	// with (/api/clusters_mgmt/v1/clusters/{id}); a node pool's is its
	// cluster's href + /node_pools/{name}, and nothing else is read.
	InternalID string
	// TenantID, ClientID and NotificationURI are the X-Ms-Home-Tenant-Id,
	// X-Ms-Client-Object-Id and Azure-AsyncNotificationUri headers.
	TenantID, ClientID, NotificationURI string
	// SystemData is the X-Ms-Arm-Resource-System-Data header, if any.
	SystemData *SystemData
	// Tags are the body's tags: nil leaves the item's alone.
	Tags map[string]string
	// OperationID and ItemID, when set, are the ids of the Operations item
	// and of a created Resources item in place of random ones, for tests
	// that name them beforehand: lowercase UUIDs, as the frontend's are.
	OperationID, ItemID string
}

// SystemData is ARM's systemData of a resource.
type SystemData struct {
	CreatedBy          string     `json:"createdBy,omitempty"`
	CreatedByType      string     `json:"createdByType,omitempty"`
	CreatedAt          *time.Time `json:"createdAt,omitempty"`
	LastModifiedBy     string     `json:"lastModifiedBy,omitempty"`
	LastModifiedByType string     `json:"lastModifiedByType,omitempty"`
	LastModifiedAt     *time.Time `json:"lastModifiedAt,omitempty"`
}

// Result is what a request wrote.
type Result struct {
	// Operation is the id of the Operations item it created; Request is
	// that item's request (Create, Update or Delete).
	Operation, Request string
	// Resource is the id of the resource's Resources item.
	Resource string
	// Canceled is the id of the operation a DELETE canceled, if it was
	// still going.
	Canceled string
}

// RequestError is the answer the frontend would give instead of 201 or
// 202, with no Cosmos item written.
type RequestError struct {
	Status  int
	Code    string
	Message string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// docBase holds the fields every Cosmos item has. The 2024-10 frontend
// reads them into its documents and writes them back on a replace.
type docBase struct {
	ID          string      `json:"id,omitempty"`
	RID         string      `json:"_rid,omitempty"`
	Self        string      `json:"_self,omitempty"`
	ETag        azcore.ETag `json:"_etag,omitempty"`
	Attachments string      `json:"_attachments,omitempty"`
	TS          int         `json:"_ts,omitempty"`
}

// resourceDoc2024 is a Resources item of the 2024-10 frontend.
type resourceDoc2024 struct {
	docBase
	Key               string            `json:"key,omitempty"`
	PartitionKey      string            `json:"partitionKey,omitempty"`
	InternalID        string            `json:"internalId,omitempty"`
	ActiveOperationID string            `json:"activeOperationId,omitempty"`
	ProvisioningState string            `json:"provisioningState,omitempty"`
	SystemData        *SystemData       `json:"systemData,omitempty"`
	Tags              map[string]string `json:"tags,omitempty"`
}

// cloudError is an OData error body.
type cloudError struct {
	Code    string       `json:"code,omitempty"`
	Message string       `json:"message,omitempty"`
	Target  string       `json:"target,omitempty"`
	Details []cloudError `json:"details,omitempty"`
}

// operationDoc2024 is an Operations item of the 2024-10 frontend.
type operationDoc2024 struct {
	docBase
	PartitionKey       string      `json:"partitionKey,omitempty"`
	TenantID           string      `json:"tenantId,omitempty"`
	ClientID           string      `json:"clientId,omitempty"`
	Request            string      `json:"request,omitempty"`
	ExternalID         string      `json:"externalId,omitempty"`
	InternalID         string      `json:"internalId,omitempty"`
	OperationID        string      `json:"operationId,omitempty"`
	NotificationURI    string      `json:"notificationUri,omitempty"`
	StartTime          time.Time   `json:"startTime,omitempty"`
	LastTransitionTime time.Time   `json:"lastTransitionTime,omitempty"`
	Status             string      `json:"status,omitempty"`
	Error              *cloudError `json:"error,omitempty"`
}

// armKey matches the resources the 2024-10 frontend served: a cluster and
// its node pools.
var armKey = regexp.MustCompile(`(?i)^/subscriptions/([^/]+)/resourceGroups/[^/]+/providers/Microsoft\.RedHatOpenShift/hcpOpenShiftClusters/[^/]+(/nodePools/([^/]+))?$`)

// clusterHref and nodePoolHref are the only internalIds the 2024-10
// frontend accepted (internal/ocm at 07deb7918).
var (
	clusterHref  = regexp.MustCompile(`^/api/clusters_mgmt/v1/clusters/[^/]+$`)
	nodePoolHref = regexp.MustCompile(`^/api/clusters_mgmt/v1/clusters/[^/]+/node_pools/[^/]+$`)
)

// Request serves r as ARO-HCP's frontend at 07deb7918 did (Shape2024_10
// only; today's shape is written item by item with PutOperation and
// PutResource). Holding the subscription's lock (waiting for it up to the
// Locks container's TTL, renewing it a second before it expires), it
// checks the resource and its parent for a conflicting provisioning
// state; a DELETE then marks the resource's active operation Canceled,
// with no error; it creates the Operations item (a new UUID, in partition
// "workaround", Accepted, or Deleting for a DELETE, startTime to the
// nanosecond) and creates or replaces the Resources item (activeOperationId,
// provisioningState). Answers other than 201/202 come back as a
// *RequestError.
func (f *Frontend) Request(ctx context.Context, r Request) (Result, error) {
	if f.Shape != Shape2024_10 {
		return Result{}, fmt.Errorf("Request serves the %s frontend's requests; write today's items with PutOperation and PutResource", Shape2024_10)
	}
	m := armKey.FindStringSubmatch(r.Key)
	if m == nil {
		return Result{}, &RequestError{http.StatusNotFound, "NotFound", "the 2024-10 frontend serves no resource " + r.Key}
	}
	sub, nodePool := m[1], m[3]
	for _, id := range []string{r.OperationID, r.ItemID} {
		if id != "" && !uuidForm.MatchString(id) {
			return Result{}, fmt.Errorf("id %q is no lowercase UUID", id)
		}
	}
	switch r.Method {
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return Result{}, &RequestError{http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method}
	}

	lockCtx, release, err := f.holdLock(ctx, sub)
	if err != nil {
		return Result{}, err
	}
	res, err := f.serve(lockCtx, r, sub, nodePool)
	return res, errors.Join(err, release())
}

func (f *Frontend) serve(ctx context.Context, r Request, sub, nodePool string) (Result, error) {
	doc, err := f.resourceDoc(ctx, sub, r.Key)
	if err != nil {
		return Result{}, err
	}
	request := "Update"
	switch {
	case r.Method == http.MethodDelete:
		request = "Delete"
		if doc == nil {
			return Result{}, &RequestError{http.StatusNoContent, "", "no such resource"}
		}
		if doc.ProvisioningState == "Deleting" {
			return Result{}, &RequestError{http.StatusConflict, "Conflict", "Resource is already deleting"}
		}
	case doc == nil && r.Method == http.MethodPatch:
		return Result{}, &RequestError{http.StatusNotFound, "ResourceNotFound", "no such resource"}
	case doc == nil:
		request = "Create"
		doc = &resourceDoc2024{docBase: docBase{ID: cmp.Or(r.ItemID, newUUID())}, Key: r.Key, PartitionKey: strings.ToLower(sub)}
	case !terminal(doc.ProvisioningState):
		return Result{}, &RequestError{http.StatusConflict, "Conflict",
			"Cannot update resource while resource is " + strings.ToLower(doc.ProvisioningState)}
	}
	// Parents in the same namespace must exist and not be deleting.
	var parent *resourceDoc2024
	if nodePool != "" {
		clusterKey := r.Key[:len(r.Key)-len("/nodePools/")-len(nodePool)]
		if parent, err = f.resourceDoc(ctx, sub, clusterKey); err != nil {
			return Result{}, err
		}
		if parent == nil {
			return Result{}, &RequestError{http.StatusInternalServerError, "InternalServerError", "no Resources item for " + clusterKey}
		}
		if parent.ProvisioningState == "Deleting" {
			return Result{}, &RequestError{http.StatusConflict, "Conflict",
				"Cannot " + strings.ToLower(request) + " resource while parent resource is deleting"}
		}
	}
	if request == "Create" {
		// The frontend stores Cluster Service's href, lowercased, and
		// accepts clusters_mgmt paths only.
		id, want := strings.ToLower(r.InternalID), clusterHref
		if nodePool != "" {
			id, want = parent.InternalID+"/node_pools/"+strings.ToLower(nodePool), nodePoolHref
			if r.InternalID != "" && !strings.EqualFold(r.InternalID, id) {
				return Result{}, fmt.Errorf("node pool %s: Cluster Service names it %s, not %s", r.Key, id, r.InternalID)
			}
		}
		if !want.MatchString(id) {
			return Result{}, &RequestError{http.StatusInternalServerError, "InternalServerError", "Invalid InternalID: " + id}
		}
		doc.InternalID = id
	}

	res := Result{Request: request, Resource: doc.ID}
	if request == "Delete" && doc.ActiveOperationID != "" {
		canceled, err := f.cancel(ctx, doc.ActiveOperationID)
		if err != nil {
			return res, err
		}
		if canceled {
			res.Canceled = doc.ActiveOperationID
		}
	}

	op, err := f.startOperation(ctx, r, request, sub, doc)
	if err != nil {
		return res, err
	}
	res.Operation = op.ID
	update := func(d *resourceDoc2024) {
		d.ActiveOperationID, d.ProvisioningState = op.ID, op.Status
		if request == "Delete" {
			return
		}
		if r.SystemData != nil {
			d.SystemData = r.SystemData
		}
		if r.Tags != nil {
			d.Tags = r.Tags
		}
	}
	if request == "Create" {
		update(doc)
		body, err := json.Marshal(doc)
		if err != nil {
			return res, err
		}
		if _, err := f.resources.CreateItem(ctx, azcosmos.NewPartitionKeyString(doc.PartitionKey), body, nil); err != nil {
			return res, fmt.Errorf("create Resources item for %s: %w", r.Key, err)
		}
		return res, nil
	}
	return res, f.updateResource(ctx, sub, r.Key, update)
}

// startOperation creates the Operations item of a request.
func (f *Frontend) startOperation(ctx context.Context, r Request, request, sub string, doc *resourceDoc2024) (*operationDoc2024, error) {
	now := time.Now().UTC()
	location := f.Location
	if location == "" {
		location = "eastus"
	}
	op := &operationDoc2024{
		docBase:      docBase{ID: cmp.Or(r.OperationID, newUUID())},
		PartitionKey: FixedOperationsPartition,
		TenantID:     r.TenantID, ClientID: r.ClientID,
		Request:    request,
		ExternalID: r.Key, InternalID: doc.InternalID,
		NotificationURI: r.NotificationURI,
		StartTime:       now, LastTransitionTime: now,
		Status: "Accepted",
	}
	if request == "Delete" {
		op.Status = "Deleting"
	}
	op.OperationID = path.Join("/subscriptions", sub, "providers/Microsoft.RedHatOpenShift/locations", strings.ToLower(location),
		"hcpOperationsStatus", op.ID)
	body, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	if _, err := f.operations.CreateItem(ctx, azcosmos.NewPartitionKeyString(FixedOperationsPartition), body, nil); err != nil {
		return nil, fmt.Errorf("create Operations item for %s: %w", r.Key, err)
	}
	return op, nil
}

// cancel marks operation id Canceled with no error, as a DELETE of its
// resource does (UpdateStatus(Canceled, nil)): a read, then a replace with
// If-Match, five tries. Fields the frontend does not know are lost, as
// they were. It reports whether it wrote.
func (f *Frontend) cancel(ctx context.Context, id string) (canceled bool, err error) {
	pk := azcosmos.NewPartitionKeyString(FixedOperationsPartition)
	err = replaceTries(func() error {
		resp, err := f.operations.ReadItem(ctx, pk, strings.ToLower(id), nil)
		if err != nil {
			return fmt.Errorf("read Operations item %s: %w", id, err)
		}
		var op operationDoc2024
		if err := json.Unmarshal(resp.Value, &op); err != nil {
			return fmt.Errorf("read Operations item %s: %w", id, err)
		}
		if op.InternalID, err = readInternalID(op.InternalID); err != nil {
			return err
		}
		if op.Status == "Canceled" {
			return nil
		}
		// time.Now(), not UTC: the frontend's UpdateStatus wrote the
		// process's local time.
		op.Status, op.Error, op.LastTransitionTime = "Canceled", nil, time.Now()
		body, err := json.Marshal(op)
		if err != nil {
			return err
		}
		if _, err := f.operations.ReplaceItem(ctx, pk, op.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &op.ETag}); err != nil {
			return fmt.Errorf("replace Operations item %s: %w", id, err)
		}
		canceled = true
		return nil
	})
	return canceled, err
}

// resourceDoc finds the Resources item of key, compared case-insensitively
// (STRINGEQUALS), or nil. The frontend then takes the URL's spelling of
// the key.
func (f *Frontend) resourceDoc(ctx context.Context, sub, key string) (*resourceDoc2024, error) {
	pager := f.resources.NewQueryItemsPager("SELECT * FROM c WHERE STRINGEQUALS(c.key, @key, true)",
		azcosmos.NewPartitionKeyString(strings.ToLower(sub)),
		&azcosmos.QueryOptions{PageSizeHint: 1, QueryParameters: []azcosmos.QueryParameter{{Name: "@key", Value: key}}})
	var doc *resourceDoc2024
	var err error
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query Resources item for %s: %w", key, err)
		}
		for _, raw := range page.Items {
			if err := json.Unmarshal(raw, &doc); err != nil {
				return nil, fmt.Errorf("read Resources item for %s: %w", key, err)
			}
		}
	}
	if doc == nil {
		return nil, nil
	}
	doc.Key = key
	if doc.InternalID, err = readInternalID(doc.InternalID); err != nil {
		return nil, err
	}
	return doc, nil
}

// readInternalID is an internalId as the 2024-10 frontend read one:
// lowercased, and a clusters_mgmt cluster or node pool path, else its
// read fails and so does the request (500).
func readInternalID(id string) (string, error) {
	id = strings.ToLower(id)
	if !clusterHref.MatchString(id) && !nodePoolHref.MatchString(id) {
		return "", &RequestError{http.StatusInternalServerError, "InternalServerError", "Invalid InternalID: " + id}
	}
	return id, nil
}

// updateResource reads key's Resources item, applies change and replaces it
// with If-Match, five tries.
func (f *Frontend) updateResource(ctx context.Context, sub, key string, change func(*resourceDoc2024)) error {
	return replaceTries(func() error {
		doc, err := f.resourceDoc(ctx, sub, key)
		if err != nil {
			return err
		}
		if doc == nil {
			return fmt.Errorf("no Resources item for %s", key)
		}
		change(doc)
		body, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if _, err := f.resources.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(strings.ToLower(sub)), doc.ID, body,
			&azcosmos.ItemOptions{IfMatchEtag: &doc.ETag}); err != nil {
			return fmt.Errorf("replace Resources item for %s: %w", key, err)
		}
		return nil
	})
}

// replaceTries runs a read and a replace with If-Match, try, again while
// the item changed in between (412), five times at most, as the frontend's
// updates did.
func replaceTries(try func() error) error {
	var err error
	for range 5 {
		if err = try(); testenv.StatusOf(err) != http.StatusPreconditionFailed {
			return err
		}
	}
	return err
}

// holdLock takes sub's lock as the 2024-10 frontend did: one try a second
// until the Locks container's TTL has passed (then 409), the item renewed
// a second before it expires until release. Losing it cancels the
// returned context.
func (f *Frontend) holdLock(ctx context.Context, sub string) (context.Context, func() error, error) {
	ttl, err := f.lockTTL(ctx)
	if err != nil {
		return nil, nil, err
	}
	owner, _ := os.Hostname()
	var l Lock
	wait, stop := context.WithTimeout(ctx, time.Duration(ttl)*time.Second)
	defer stop()
	for {
		var ok bool
		if l, ok, err = f.TryLock(wait, sub, owner); ok {
			break
		}
		if err == nil {
			select {
			case <-wait.Done():
				err = wait.Err()
			case <-time.After(time.Second):
				continue
			}
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, nil, &RequestError{http.StatusConflict, "Conflict",
				fmt.Sprintf("Failed to acquire lock for subscription '%s': timed out", sub)}
		}
		return nil, nil, err
	}
	held, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var item struct {
				TS  int64 `json:"_ts"`
				TTL int64 `json:"ttl"`
			}
			_ = json.Unmarshal(l.body, &item)
			renewAt := time.Unix(item.TS, 0).Add(time.Duration(item.TTL-1) * time.Second)
			select {
			case <-held.Done():
				return
			case <-time.After(time.Until(renewAt)):
			}
			next, err := f.Renew(held, l)
			if err != nil {
				cancel(fmt.Errorf("lock of %s lost: %w", sub, err))
				return
			}
			l = next
		}
	}()
	release := func() error {
		lost := context.Cause(held)
		cancel(nil)
		<-done
		if lost != nil && !errors.Is(lost, context.Canceled) {
			return lost
		}
		uctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stop()
		return f.Unlock(uctx, l)
	}
	return held, release, nil
}

func terminal(status string) bool {
	return status == "Succeeded" || status == "Failed" || status == "Canceled"
}

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// NewUUID returns a random (version 4) UUID from r.
func NewUUID(r io.Reader) string {
	var b [16]byte
	_, _ = io.ReadFull(r, b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newUUID returns a random (version 4) UUID, as the frontend's ids are.
func newUUID() string { return NewUUID(rand.Reader) }
