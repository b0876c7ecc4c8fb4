package functions

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting in request bodies and in decoded payloads.
// Real envelopes are a few levels deep; the bound keeps hostile input from
// costing deep recursion.
const maxDepth = 64

// maxWrapLevels bounds how many layers of JSON-string quoting and base64 a
// payload may carry before the object itself.
const maxWrapLevels = 10

// envelope is the request body the host POSTs for every invocation.
type envelope struct {
	Data     map[string]json.RawMessage
	Metadata map[string]json.RawMessage
}

// decodeEnvelope parses a request body into its Data and Metadata maps.
// Top-level keys match case-insensitively; other keys are ignored. A missing
// or null Data or Metadata is an empty map.
func decodeEnvelope(body []byte) (envelope, error) {
	env := envelope{Data: map[string]json.RawMessage{}, Metadata: map[string]json.RawMessage{}}
	body = trimSpace(body)
	if len(body) == 0 {
		return env, errors.New(`request body is empty, want a JSON object {"Data":{...},"Metadata":{...}}`)
	}
	if !utf8.Valid(body) {
		return env, errors.New("request body is not valid UTF-8")
	}
	if err := checkDepth(body); err != nil {
		return env, fmt.Errorf("request body: %w", err)
	}
	// The host's envelopes take this one pass (json matches field names
	// case-insensitively); anything it refuses goes the long way below,
	// which says what is wrong.
	var fast struct{ Data, Metadata map[string]json.RawMessage }
	if body[0] == '{' && json.Unmarshal(body, &fast) == nil {
		if fast.Data != nil {
			env.Data = fast.Data
		}
		if fast.Metadata != nil {
			env.Metadata = fast.Metadata
		}
		return env, nil
	}
	if !json.Valid(body) {
		return env, fmt.Errorf("request body is not valid JSON: %w", syntaxError(body))
	}
	if k := kindOf(body); k != "an object" {
		return env, fmt.Errorf(`request body is %s, want a JSON object {"Data":{...},"Metadata":{...}}`, k)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return env, fmt.Errorf("request body: %w", err)
	}
	for key, raw := range top {
		var dst *map[string]json.RawMessage
		switch {
		case strings.EqualFold(key, "Data"):
			dst = &env.Data
		case strings.EqualFold(key, "Metadata"):
			dst = &env.Metadata
		default:
			continue
		}
		raw = trimSpace(raw)
		switch k := kindOf(raw); k {
		case "null":
			continue
		case "an object":
			if err := json.Unmarshal(raw, dst); err != nil {
				return env, fmt.Errorf("request body: %s: %w", key, err)
			}
		default:
			return env, fmt.Errorf("request body: %s is %s, want a JSON object", key, k)
		}
	}
	return env, nil
}

// lookup finds key in m, exactly or else case-insensitively.
func lookup(m map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

// unwrapObject peels the layers the host may put around a JSON object: a
// JSON string holding the object's text (quoted once or several times) and
// base64 of any of those. It returns the object's JSON text, which is valid
// JSON and nests at most maxDepth levels.
func unwrapObject(raw []byte) ([]byte, error) {
	return unwrap(raw, '{', "JSON object")
}

// unwrapArray is unwrapObject for a JSON array.
func unwrapArray(raw []byte) ([]byte, error) {
	return unwrap(raw, '[', "JSON array")
}

// unwrap peels quoting and base64 off raw until a JSON value that starts
// with open, a want.
func unwrap(raw []byte, open byte, want string) ([]byte, error) {
	b := raw
	for level := 0; ; level++ {
		if level > maxWrapLevels {
			return nil, fmt.Errorf("wrapped in more than %d layers of quoting or base64", maxWrapLevels)
		}
		b = trimSpace(b)
		if len(b) == 0 {
			if level == 0 {
				return nil, fmt.Errorf("is empty, want a %s", want)
			}
			return nil, fmt.Errorf("holds an empty string, want a %s", want)
		}
		switch b[0] {
		case open:
			if err := checkDepth(b); err != nil {
				return nil, err
			}
			if !json.Valid(b) {
				return nil, fmt.Errorf("is not a valid %s: %w", want, syntaxError(b))
			}
			return b, nil
		case '"':
			var s string
			if err := json.Unmarshal(b, &s); err != nil {
				return nil, fmt.Errorf("is not a valid JSON string: %w", syntaxError(b))
			}
			b = []byte(s)
			continue
		}
		// Base64 of an object, an array or a quoted string starts with a
		// letter and is never valid JSON, so valid JSON here is the wrong
		// kind of value.
		if json.Valid(b) {
			if level == 0 {
				return nil, fmt.Errorf("is %s, want a %s", kindOf(b), want)
			}
			return nil, fmt.Errorf("holds %s, want a %s", kindOf(b), want)
		}
		decoded, err := decodeBase64(b)
		if err != nil {
			return nil, fmt.Errorf("is neither JSON nor base64: %w", err)
		}
		if !utf8.Valid(decoded) {
			return nil, errors.New("holds base64 of bytes that are not UTF-8 text")
		}
		b = decoded
	}
}

// decodeBase64 accepts standard and URL-safe base64, with or without padding.
func decodeBase64(b []byte) ([]byte, error) {
	var first error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		out, err := enc.DecodeString(string(b))
		if err == nil {
			return out, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, fmt.Errorf("invalid base64: %w", first)
}

// trimSpace removes JSON whitespace and a leading UTF-8 byte order mark.
func trimSpace(b []byte) []byte {
	b = bytes.Trim(b, " \t\r\n")
	if t, ok := bytes.CutPrefix(b, []byte("\uFEFF")); ok {
		b = bytes.Trim(t, " \t\r\n")
	}
	return b
}

// kindOf names the kind of JSON value b starts with, for error messages.
func kindOf(b []byte) string {
	b = trimSpace(b)
	if len(b) == 0 {
		return "empty"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// syntaxError returns the decoder's description of what is wrong with b.
func syntaxError(b []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("extra data after the JSON value")
	}
	return errors.New("invalid JSON")
}

// checkDepth fails when b nests objects and arrays deeper than maxDepth. It
// only counts brackets outside strings; validity is checked elsewhere.
func checkDepth(b []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				return fmt.Errorf("nests deeper than %d levels", maxDepth)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// lenientText returns the text of a scalar that may arrive as a JSON string,
// a string quoted again (several levels) or a bare number or boolean. Null,
// objects, arrays and invalid JSON give "".
func lenientText(raw []byte) string {
	b := trimSpace(raw)
	for range maxWrapLevels {
		if len(b) == 0 {
			return ""
		}
		switch b[0] {
		case '"':
			var s string
			if json.Unmarshal(b, &s) != nil {
				return ""
			}
			b = trimSpace([]byte(s))
		case '{', '[', 'n':
			if bytes.Equal(b, []byte("null")) || json.Valid(b) {
				return ""
			}
			return string(b)
		default:
			return string(b)
		}
	}
	return ""
}

// lenientInt reads an integer given as a number, a string or a quoted
// string. Anything else, or a value out of range, gives 0.
func lenientInt(raw []byte) int64 {
	s := lenientText(raw)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	// Some serializers write counts as 1.0; take them when they are whole
	// and in range (converting an out-of-range float is not defined).
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= -(1<<63) && f < 1<<63 && f == float64(int64(f)) {
		return int64(f)
	}
	return 0
}

// lenientBool reads a boolean given as true/false or as a string of them
// (any case). Anything else gives false.
func lenientBool(raw []byte) bool {
	b, _ := strconv.ParseBool(strings.ToLower(lenientText(raw)))
	return b
}

// timeLayouts are the forms in which the host and the Storage service write
// times. A layout without a zone is read as UTC.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
	time.RFC1123,
	time.RFC1123Z,
	"01/02/2006 15:04:05 -07:00",
	"1/2/2006 3:04:05 PM -07:00",
	"01/02/2006 15:04:05",
}

// lenientTime reads a time given as a (possibly quoted) string in one of
// timeLayouts. The result is in UTC; anything unreadable gives the zero time.
func lenientTime(raw []byte) time.Time {
	t, _ := parseTime(lenientText(raw))
	return t
}

func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
