package hostemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// The host reads a handler's response and the queue messages it hands to a
// function with Newtonsoft.Json, and what it writes to a queue or into an
// invocation's Metadata is Newtonsoft's text of what it read. This file
// models the part of Newtonsoft.Json (JsonTextReader, JValue, JToken,
// JsonTextWriter) that shapes that text.

// jkind is a JTokenType.
type jkind int

const (
	jNull jkind = iota
	jBool
	jInteger
	jFloat
	jString
	jDate
	jArray
	jObject
)

// dateKind is a DateTime's Kind.
type dateKind int

const (
	kindUnspecified dateKind = iota
	kindUTC
	kindLocal
)

// jtoken is a JSON value as Newtonsoft.Json holds it after reading it with
// its default settings (DateParseHandling.DateTime,
// FloatParseHandling.Double, DateTimeZoneHandling.RoundtripKind).
type jtoken struct {
	kind jkind
	b    bool
	// text is a string's value or an integer's decimal digits.
	text string
	f    float64
	// t is a date's wall clock (in loc for kindLocal); kind its Kind.
	t     time.Time
	dkind dateKind
	items []*jtoken
	props []jprop
}

type jprop struct {
	name  string
	value *jtoken
}

// parseJToken reads one JSON value. loc is the host's local time zone,
// which a date with an offset is converted to (DateTimeUtils.
// TryParseDateTimeIso makes it a Local DateTime).
func parseJToken(data []byte, loc *time.Location) (*jtoken, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := readJToken(dec, loc)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("additional text found in JSON string after parsing content")
	}
	return t, nil
}

func readJToken(dec *json.Decoder, loc *time.Location) (*jtoken, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '[':
			a := &jtoken{kind: jArray, items: []*jtoken{}}
			for dec.More() {
				item, err := readJToken(dec, loc)
				if err != nil {
					return nil, err
				}
				a.items = append(a.items, item)
			}
			_, err := dec.Token()
			return a, err
		case '{':
			o := &jtoken{kind: jObject}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				name, _ := k.(string)
				val, err := readJToken(dec, loc)
				if err != nil {
					return nil, err
				}
				o.set(name, val)
			}
			_, err := dec.Token()
			return o, err
		}
		return nil, fmt.Errorf("unexpected %v", v)
	case string:
		if t, kind, ok := parseDotnetDate(v, loc); ok {
			return &jtoken{kind: jDate, t: t, dkind: kind}, nil
		}
		return &jtoken{kind: jString, text: v}, nil
	case json.Number:
		return numberToken(string(v)), nil
	case bool:
		return &jtoken{kind: jBool, b: v}, nil
	case nil:
		return &jtoken{kind: jNull}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// set adds a property; a repeated name replaces the value in place
// (JsonLoadSettings.DuplicatePropertyNameHandling.Replace).
func (o *jtoken) set(name string, v *jtoken) {
	for i := range o.props {
		if o.props[i].name == name {
			o.props[i].value = v
			return
		}
	}
	o.props = append(o.props, jprop{name: name, value: v})
}

// numberToken reads a number as JsonTextReader does: an integer is a long
// (a BigInteger beyond), anything with a fraction or exponent a double.
func numberToken(s string) *jtoken {
	if !strings.ContainsAny(s, ".eE") {
		var n big.Int
		if _, ok := n.SetString(s, 10); ok {
			return &jtoken{kind: jInteger, text: n.String()}
		}
	}
	f, _ := strconv.ParseFloat(s, 64) // out of range: ±Inf, as double.Parse
	return &jtoken{kind: jFloat, f: f}
}

// parseDotnetDate recognises a string that JsonTextReader reads as a
// DateTime (DateTimeUtils.TryParseDateTime with DateTimeParser): ISO 8601
// "yyyy-MM-ddTHH:mm:ss", up to seven fraction digits, and "Z", an offset or
// nothing. loc is the host's local zone.
func parseDotnetDate(s string, loc *time.Location) (time.Time, dateKind, bool) {
	if len(s) < 19 || len(s) > 40 || s[0] < '0' || s[0] > '9' || s[10] != 'T' {
		return time.Time{}, 0, false
	}
	digits := func(i, n int) (int, bool) {
		if i+n > len(s) {
			return 0, false
		}
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := digits(0, 4)
	month, ok2 := digits(5, 2)
	day, ok3 := digits(8, 2)
	if !ok1 || !ok2 || !ok3 || s[4] != '-' || s[7] != '-' || year < 1 || month < 1 || month > 12 ||
		day < 1 || day > time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day() {
		return time.Time{}, 0, false
	}
	hour, ok1 := digits(11, 2)
	minute, ok2 := digits(14, 2)
	second, ok3 := digits(17, 2)
	if !ok1 || !ok2 || !ok3 || s[13] != ':' || s[16] != ':' || hour > 24 || minute > 59 || second > 59 ||
		(hour == 24 && (minute != 0 || second != 0)) {
		return time.Time{}, 0, false
	}
	i := 19
	fraction := 0 // in 100 ns ticks
	if i < len(s) && s[i] == '.' {
		n := 0
		for i++; i < len(s) && n < 7 && s[i] >= '0' && s[i] <= '9'; i++ {
			fraction = fraction*10 + int(s[i]-'0')
			n++
		}
		if n == 0 {
			return time.Time{}, 0, false
		}
		for range 7 - n {
			fraction *= 10
		}
		if hour == 24 && fraction != 0 {
			return time.Time{}, 0, false
		}
	}
	// DateTimeParser.ParseZone.
	zone, zoneHour, zoneMinute := 0, 0, 0 // zone: 0 none, 1 UTC, 2 west, 3 east
	if i < len(s) {
		if c := s[i]; c == 'z' || c == 'Z' {
			zone = 1
			i++
		} else {
			if i+2 < len(s) {
				if h, ok := digits(i+1, 2); ok {
					zoneHour = h
					switch c {
					case '-':
						zone, i = 2, i+3
					case '+':
						zone, i = 3, i+3
					}
				}
			}
			if i < len(s) {
				if s[i] == ':' {
					i++
				}
				if i+1 < len(s) {
					if m, ok := digits(i, 2); ok {
						zoneMinute = m
						i += 2
					}
				}
			}
		}
	}
	if i != len(s) {
		return time.Time{}, 0, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, second, fraction*100, time.UTC)
	offset := time.Duration(zoneHour)*time.Hour + time.Duration(zoneMinute)*time.Minute
	switch zone {
	case 1:
		return t, kindUTC, true
	case 2:
		return t.Add(offset).In(loc), kindLocal, true
	case 3:
		return t.Add(-offset).In(loc), kindLocal, true
	}
	return t, kindUnspecified, true
}

// indented is JToken.ToString(): Formatting.Indented, two spaces. newline
// is the host's Environment.NewLine.
func (t *jtoken) indented() string {
	var b strings.Builder
	t.write(&b, true, 0)
	return b.String()
}

// compact is the token written with Formatting.None.
func (t *jtoken) compact() string {
	var b strings.Builder
	t.write(&b, false, 0)
	return b.String()
}

// newline is Environment.NewLine on the Linux hosts custom handlers run on.
const newline = "\n"

func (t *jtoken) write(b *strings.Builder, indent bool, depth int) {
	nl := func(d int) {
		if indent {
			b.WriteString(newline)
			b.WriteString(strings.Repeat("  ", d))
		}
	}
	switch t.kind {
	case jNull:
		b.WriteString("null")
	case jBool:
		b.WriteString(strconv.FormatBool(t.b))
	case jInteger:
		b.WriteString(t.text)
	case jFloat:
		// JsonConvert.ToString(double): "R", then EnsureDecimalPlace.
		s := dotnetDouble(t.f)
		if !math.IsInf(t.f, 0) && !strings.ContainsAny(s, ".E") {
			s += ".0"
		}
		if math.IsInf(t.f, 0) {
			s = newtonsoftQuote(s)
		}
		b.WriteString(s)
	case jString:
		b.WriteString(newtonsoftQuote(t.text))
	case jDate:
		b.WriteString(newtonsoftQuote(t.isoDate()))
	case jArray:
		b.WriteByte('[')
		for i, item := range t.items {
			if i > 0 {
				b.WriteByte(',')
			}
			nl(depth + 1)
			item.write(b, indent, depth+1)
		}
		if len(t.items) > 0 {
			nl(depth)
		}
		b.WriteByte(']')
	case jObject:
		b.WriteByte('{')
		for i, p := range t.props {
			if i > 0 {
				b.WriteByte(',')
			}
			nl(depth + 1)
			b.WriteString(newtonsoftQuote(p.name))
			b.WriteByte(':')
			if indent {
				b.WriteByte(' ')
			}
			p.value.write(b, indent, depth+1)
		}
		if len(t.props) > 0 {
			nl(depth)
		}
		b.WriteByte('}')
	}
}

// isoDate is a DateTime as JsonTextWriter writes it
// (DateFormatHandling.IsoDateFormat): seven fraction digits with the
// trailing zeros cut, "Z" for a UTC DateTime, the offset for a local one.
func (t *jtoken) isoDate() string {
	s := t.t.Format("2006-01-02T15:04:05.9999999")
	switch t.dkind {
	case kindUTC:
		s += "Z"
	case kindLocal:
		s += t.t.Format("-07:00")
	}
	return s
}

// valueText is a primitive's text as the host turns it into a string:
// JValue.ToString() for the elements of an output array, and the (string)
// cast Utility.ApplyBindingData applies to a message's properties. Both
// format with the invariant culture on the hosts this models. A null is
// the empty string.
func (t *jtoken) valueText() string {
	switch t.kind {
	case jBool:
		if t.b {
			return "True"
		}
		return "False"
	case jInteger, jString:
		return t.text
	case jFloat:
		return dotnetDouble(t.f)
	case jDate:
		// DateTime.ToString() with the invariant culture's "G" pattern.
		return t.t.Format("01/02/2006 15:04:05")
	case jArray, jObject:
		return t.indented()
	}
	return ""
}

// dotnetDouble is double.ToString("R") on .NET Core 3.0 and later: the
// shortest text that reads back the same, in exponent form when the
// decimal exponent is 15 or more, or below -5.
func dotnetDouble(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	case f == 0:
		if math.Signbit(f) {
			return "-0"
		}
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	scale := x + 1 // the decimal point's position after the first digit
	if scale > max(len(digits), 15) || scale < -3 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if x < 0 {
			es, x = "-", -x
		}
		return fmt.Sprintf("%s%sE%s%02d", sign, m, es, x)
	}
	switch {
	case scale <= 0:
		return sign + "0." + strings.Repeat("0", -scale) + digits
	case scale >= len(digits):
		return sign + digits + strings.Repeat("0", scale-len(digits))
	default:
		return sign + digits[:scale] + "." + digits[scale:]
	}
}

// newtonsoftQuote is s as a JSON string the way Newtonsoft.Json writes it
// (JavaScriptUtils.WriteEscapedJavaScriptString, StringEscapeHandling.
// Default): control characters, '"' and '\' escaped, and U+0085, U+2028
// and U+2029; nothing else, HTML characters included.
func newtonsoftQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '\u0085', '\u2028', '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// isJSONText is Utility.IsJson: the trimmed text starts with '{' and ends
// with '}', or starts with '[' and ends with ']'.
func isJSONText(s string) bool {
	s = strings.TrimSpace(s)
	return len(s) >= 2 && (s[0] == '{' && s[len(s)-1] == '}' || s[0] == '[' && s[len(s)-1] == ']')
}
