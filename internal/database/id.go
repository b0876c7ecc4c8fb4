package database

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes is the longest item id Cosmos DB stores, in bytes of UTF-8.
const MaxIDBytes = 1023

// ErrInvalidID is wrapped by the errors of CheckID.
var ErrInvalidID = errors.New("not a usable Cosmos DB id")

// CheckID reports why id cannot name an item that opstatus reads and writes
// by its id, or nil if it can.
//
// Cosmos DB takes as an id any non-empty string of at most MaxIDBytes bytes
// of UTF-8 without '/', '\', '?' or '#': those would end or split the item's
// URL path. Everything else is allowed, and so accepted here: spaces of every
// kind (leading and trailing ones too), control characters, '%', '+', quotes,
// any other Unicode; the SDK escapes the id in the URL path. CheckID also
// refuses "." and "..", which Cosmos DB may store but which, as the last
// segment of a point operation's URL, name another resource once an HTTP
// stack cleans the path.
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: the id is empty", ErrInvalidID)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: id %s is not valid UTF-8", ErrInvalidID, QuoteID(id))
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%w: id %s is %d bytes long, more than %d", ErrInvalidID, QuoteID(id), len(id), MaxIDBytes)
	case id == "." || id == "..":
		return fmt.Errorf("%w: id %q is a dot segment of URL paths", ErrInvalidID, id)
	}
	if i := strings.IndexAny(id, `/\?#`); i >= 0 {
		return fmt.Errorf("%w: id %s holds %q, which Cosmos DB ids cannot hold", ErrInvalidID, QuoteID(id), id[i])
	}
	return nil
}

// quotedIDRunes bounds the part of an id that QuoteID shows.
const quotedIDRunes = 64

// QuoteID quotes id for a log line or an error: Go-escaped, so that spaces,
// control characters and invisible runes show, and cut after its first 64
// runes.
func QuoteID(id string) string {
	if utf8.RuneCountInString(id) <= quotedIDRunes {
		return fmt.Sprintf("%q", id)
	}
	return fmt.Sprintf("%.*q...", quotedIDRunes, id)
}
