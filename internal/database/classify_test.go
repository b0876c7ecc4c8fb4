package database

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/stretchr/testify/require"
)

// notFoundAnswer is Cosmos DB's 404 to method on path, with subStatus in
// x-ms-substatus unless it is empty, as the client reports it.
func notFoundAnswer(method, path, subStatus string) error {
	resp := &http.Response{
		StatusCode: http.StatusNotFound,
		Status:     "404 Not Found",
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader(`{"code":"NotFound","message":"not found"}`)),
		Request:    &http.Request{Method: method, URL: &url.URL{Scheme: "https", Host: "account.example", Path: path}},
	}
	if subStatus != "" {
		resp.Header.Set("x-ms-substatus", subStatus)
	}
	return runtime.NewResponseError(resp)
}

// A 404 means a missing item only when the request named one item and no
// sub-status says otherwise; the path is read by its segments, so that a
// container named "docs" is no item.
func TestClassifyNotFound(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, subStatus string
		want                          error
		names                         string // what the error must name, if anything
	}{
		{"item read", http.MethodGet, "/dbs/db/colls/Resources/docs/r1", "", ErrNotFound, ""},
		{"item read, sub-status 0", http.MethodGet, "/dbs/db/colls/Resources/docs/r1", "0", ErrNotFound, ""},
		{"item replace", http.MethodPut, "/dbs/db/colls/Resources/docs/r1", "", ErrNotFound, ""},
		{"item read, owner not found", http.MethodGet, "/dbs/db/colls/Resources/docs/r1", "1003", ErrContainerNotFound, `container "Resources" of database "db"`},
		{"item read, read session not available", http.MethodGet, "/dbs/db/colls/Resources/docs/r1", "1002", ErrUnavailable, ""},
		{"query", http.MethodPost, "/dbs/db/colls/Resources/docs", "", ErrContainerNotFound, `container "Resources" of database "db"`},
		{"query, owner not found", http.MethodPost, "/dbs/db/colls/Resources/docs", "1003", ErrContainerNotFound, `container "Resources"`},
		{"query, read session not available", http.MethodPost, "/dbs/db/colls/Resources/docs", "1002", ErrUnavailable, ""},
		{"create", http.MethodPost, "/dbs/db/colls/Locks/docs/", "", ErrContainerNotFound, `container "Locks"`},
		{"container read", http.MethodGet, "/dbs/db/colls/Locks", "", ErrContainerNotFound, `container "Locks" of database "db"`},
		{"query of a container named docs", http.MethodPost, "/dbs/db/colls/docs/docs", "", ErrContainerNotFound, `container "docs"`},
		{"item of a container named docs", http.MethodGet, "/dbs/db/colls/docs/docs/x", "", ErrNotFound, ""},
		{"a path of no known form", http.MethodGet, "/x/dbs/db/colls/c/docs/i", "", ErrContainerNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classify(notFoundAnswer(tc.method, tc.path, tc.subStatus))
			require.ErrorIs(t, err, tc.want)
			for _, other := range []error{ErrNotFound, ErrContainerNotFound, ErrUnavailable} {
				if other != tc.want {
					require.NotErrorIs(t, err, other)
				}
			}
			require.ErrorContains(t, err, tc.names)
		})
	}

	// An answer without its request is no item's.
	resp := &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	err := classify(runtime.NewResponseError(resp))
	require.ErrorIs(t, err, ErrContainerNotFound)
	require.NotErrorIs(t, err, ErrNotFound)
}

// answer is Cosmos DB's answer of status to a write of an item of
// container Billing, with body, as the client reports it.
func answer(status int, body string) error {
	return runtime.NewResponseError(&http.Response{
		StatusCode: status,
		Status:     http.StatusText(status),
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader(body)),
		Request: &http.Request{Method: http.MethodPost,
			URL: &url.URL{Scheme: "https", Host: "account.example", Path: "/dbs/db/colls/Billing/docs"}},
	})
}

// A 4xx that no retry changes is a refusal naming the container, the
// status, and Cosmos DB's code and message, cut; the others are not.
func TestClassifyRefused(t *testing.T) {
	for _, status := range []int{400, 401, 403, 405, 413, 414, 423} {
		err := classify(answer(status, `{"code":"BadRequest","message":"Message: {\"Errors\":[\"PartitionKey extracted from document doesn't match\"]}`+strings.Repeat(" stats", 200)+`"}`))
		require.ErrorIs(t, err, ErrRefused, status)
		var refused *RefusedError
		require.ErrorAs(t, err, &refused)
		require.Equal(t, "Billing", refused.Container)
		require.Equal(t, status, refused.StatusCode)
		require.Equal(t, "BadRequest", refused.Code)
		require.True(t, strings.HasPrefix(refused.Message, `Message: {"Errors":["PartitionKey extracted`), refused.Message)
		require.LessOrEqual(t, len(refused.Message), maxRefusalMessage+3)
		require.NotErrorIs(t, err, ErrUnavailable)
	}
	// A body that is not Cosmos DB's still gives the status.
	err := classify(answer(http.StatusRequestEntityTooLarge, "<html>too large</html>"))
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, http.StatusRequestEntityTooLarge, refused.StatusCode)

	for _, status := range []int{404, 408, 409, 412, 429, 449, 500, 503} {
		require.NotErrorIs(t, classify(answer(status, `{"code":"x","message":"y"}`)), ErrRefused, status)
	}
}
