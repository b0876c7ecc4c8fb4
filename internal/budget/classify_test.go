package budget

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/stretchr/testify/require"
)

// Only a 404 of the ledger item itself is a missing ledger: the Gate
// answers that by creating one, holding no permits for ExpireAfter.
func TestClassify(t *testing.T) {
	answer := func(status int, subStatus string) error {
		resp := &http.Response{
			StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
			Body:    io.NopCloser(strings.NewReader(`{"code":"x","message":"x"}`)),
			Request: &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "https", Host: "account.example", Path: "/dbs/db/colls/Leases/docs/" + ID}},
		}
		if subStatus != "" {
			resp.Header.Set("x-ms-substatus", subStatus)
		}
		return runtime.NewResponseError(resp)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: none of the Store's errors
	}{
		{"missing item", answer(http.StatusNotFound, ""), ErrNotFound},
		{"replica behind the session", answer(http.StatusNotFound, "1002"), nil},
		{"missing container", answer(http.StatusNotFound, "1003"), nil},
		{"conflict", answer(http.StatusConflict, ""), ErrConflict},
		{"stale etag", answer(http.StatusPreconditionFailed, ""), ErrPreconditionFailed},
		{"throttled", answer(http.StatusTooManyRequests, ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err)
			for _, sentinel := range []error{ErrNotFound, ErrConflict, ErrPreconditionFailed} {
				require.Equal(t, errors.Is(tc.want, sentinel), errors.Is(got, sentinel), "%v", got)
			}
		})
	}
}
