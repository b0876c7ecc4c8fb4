package armeval

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// expression evaluates the text of one expression (without its brackets).
func (e *evaluator) expression(src string) (any, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, fmt.Errorf("[%s]: %w", src, err)
	}
	p := &parser{toks: toks, e: e}
	v, err := p.expr()
	if err == nil && p.pos != len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	if err != nil {
		return nil, fmt.Errorf("[%s]: %w", src, err)
	}
	if ref, ok := v.(reference); ok {
		return nil, fmt.Errorf("[%s]: reference(%s) is used whole; only its modelled properties can be", src, ref.id)
	}
	return v, nil
}

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number, or the punctuation itself
	text string
}

func tokenize(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case strings.IndexByte("(),.[]", c) >= 0:
			toks = append(toks, token{kind: c, text: string(c)})
			i++
		case c == '\'':
			var b strings.Builder
			i++
			for {
				if i >= len(src) {
					return nil, fmt.Errorf("unterminated string")
				}
				if src[i] == '\'' {
					if i+1 < len(src) && src[i+1] == '\'' {
						b.WriteByte('\'')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(src[i])
				i++
			}
			toks = append(toks, token{kind: 's', text: b.String()})
		case c == '-' || unicode.IsDigit(rune(c)):
			j := i + 1
			for j < len(src) && unicode.IsDigit(rune(src[j])) {
				j++
			}
			toks = append(toks, token{kind: 'n', text: src[i:j]})
			i = j
		case unicode.IsLetter(rune(c)):
			j := i + 1
			for j < len(src) && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j])) || src[j] == '_') {
				j++
			}
			toks = append(toks, token{kind: 'i', text: src[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q", c)
		}
	}
	return toks, nil
}

type parser struct {
	toks []token
	pos  int
	e    *evaluator
	// skip is set while parsing the branch of an if() that ARM does not
	// evaluate: calls are parsed, not made.
	skip bool
}

func (p *parser) peek(kind byte) bool {
	return p.pos < len(p.toks) && p.toks[p.pos].kind == kind
}

func (p *parser) want(kind byte) error {
	if !p.peek(kind) {
		return fmt.Errorf("expected %q", kind)
	}
	p.pos++
	return nil
}

// expr := primary ( '.' name | '[' expr ']' )*
func (p *parser) expr() (any, error) {
	v, err := p.primary()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.peek('.'):
			p.pos++
			if !p.peek('i') {
				return nil, fmt.Errorf("expected a property name after '.'")
			}
			name := p.toks[p.pos].text
			p.pos++
			if p.skip {
				continue
			}
			if v, err = property(v, name); err != nil {
				return nil, err
			}
		case p.peek('['):
			p.pos++
			idx, err := p.expr()
			if err != nil {
				return nil, err
			}
			if err := p.want(']'); err != nil {
				return nil, err
			}
			if p.skip {
				continue
			}
			if v, err = index(v, idx); err != nil {
				return nil, err
			}
		default:
			return v, nil
		}
	}
}

func (p *parser) primary() (any, error) {
	if p.pos >= len(p.toks) {
		return nil, fmt.Errorf("unexpected end")
	}
	t := p.toks[p.pos]
	p.pos++
	switch t.kind {
	case 's':
		return t.text, nil
	case 'n':
		return strconv.ParseInt(t.text, 10, 64)
	case 'i':
		if err := p.want('('); err != nil {
			return nil, err
		}
		if strings.EqualFold(t.text, "if") && !p.skip {
			return p.ifCall()
		}
		var args []any
		for !p.peek(')') {
			a, err := p.expr()
			if err != nil {
				return nil, err
			}
			args = append(args, a)
			if !p.peek(',') {
				break
			}
			p.pos++
		}
		if err := p.want(')'); err != nil {
			return nil, err
		}
		if p.skip {
			return nil, nil
		}
		return p.e.call(t.text, args)
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

// ifCall evaluates if(condition, then, else) after its '(': as ARM does,
// only the branch the condition chooses is evaluated, so the other may
// fail() or read what does not exist.
func (p *parser) ifCall() (any, error) {
	c, err := p.expr()
	if err != nil {
		return nil, err
	}
	cond, ok := c.(bool)
	if !ok {
		return nil, fmt.Errorf("if: the condition %v is not a bool", c)
	}
	var branches [2]any
	for i := range branches {
		if err := p.want(','); err != nil {
			return nil, fmt.Errorf("if takes a condition and two values")
		}
		p.skip = cond == (i == 1)
		branches[i], err = p.expr()
		p.skip = false
		if err != nil {
			return nil, err
		}
	}
	if err := p.want(')'); err != nil {
		return nil, fmt.Errorf("if takes a condition and two values")
	}
	if cond {
		return branches[0], nil
	}
	return branches[1], nil
}

// reference stands for the runtime state of a resource that reference()
