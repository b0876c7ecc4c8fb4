package identity

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEndpoint(t *testing.T) {
	const secret, clientID = "header-secret", "0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b"
	ep := New(secret, clientID)
	srv := httptest.NewServer(ep)
	defer srv.Close()
	get := func(path, header string) (*http.Response, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if header != "" {
			req.Header.Set("X-IDENTITY-HEADER", header)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp, body
	}
	good := Path + "?api-version=2019-08-01&resource=api%3A%2F%2Fcs&client_id=" + clientID
	for _, tc := range []struct {
		name, path, header string
		code               int
	}{
		{"no secret", good, "", http.StatusUnauthorized},
		{"wrong secret", good, "other", http.StatusUnauthorized},
		{"other API version", Path + "?api-version=2017-09-01&resource=api%3A%2F%2Fcs&client_id=" + clientID, secret, http.StatusBadRequest},
		{"no resource", Path + "?api-version=2019-08-01&client_id=" + clientID, secret, http.StatusBadRequest},
		{"system-assigned", Path + "?api-version=2019-08-01&resource=api%3A%2F%2Fcs", secret, http.StatusBadRequest},
		{"other identity", Path + "?api-version=2019-08-01&resource=api%3A%2F%2Fcs&client_id=x", secret, http.StatusBadRequest},
		{"other path", "/token?api-version=2019-08-01&resource=api%3A%2F%2Fcs&client_id=" + clientID, secret, http.StatusNotFound},
	} {
		resp, body := get(tc.path, tc.header)
		require.Equal(t, tc.code, resp.StatusCode, tc.name)
		require.EqualValues(t, tc.code, body["statusCode"], tc.name)
	}
	require.Empty(t, ep.Issued())

	resp, body := get(good, secret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	issued := ep.Issued()
	require.Len(t, issued, 1)
	require.Equal(t, issued[0].Value, body["access_token"])
	require.Equal(t, strconv.FormatInt(issued[0].ExpiresOn.Unix(), 10), body["expires_on"], "Unix seconds as a string")
	require.Equal(t, "api://cs", body["resource"])
	require.Equal(t, "Bearer", body["token_type"])
	require.Equal(t, clientID, body["client_id"])
	require.WithinDuration(t, time.Now().Add(DefaultLifetime), issued[0].ExpiresOn, time.Minute)
	require.True(t, ep.Valid(issued[0].Value, "api://cs"))
	require.False(t, ep.Valid(issued[0].Value, "api://other"), "another audience's gateway refuses it")
	require.Equal(t, 8, ep.Requests())

	ep.Fail(http.StatusServiceUnavailable)
	resp, _ = get(good, secret)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Len(t, ep.Issued(), 1)
}
