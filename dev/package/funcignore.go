package main

import (
	"regexp"
	"strings"
)

// ignoreParser decides which files of the app a .funcignore lets into the
// package. It is Core Tools' GitIgnoreParser
// (src/Cli/func/Common/GitIgnoreParser.cs, itself a port of codemix's
// gitignore-parser), not git's matcher: the package must hold what
// `func azure functionapp publish` would upload, and the two differ. Each
// pattern matches a prefix of the slash-separated path up to a word
// boundary, from the root only, and a "!" pattern that matches wins over
// every other line, whatever their order.
type ignoreParser struct {
	positive *regexp.Regexp
	negative *regexp.Regexp
}

// regexpSpecials are the characters GitIgnoreParser.PrepareRegexPattern
// escapes before it turns the wildcards into regular expressions.
var regexpSpecials = regexp.MustCompile(`[\-\[\]/{}()+?.\\^$|]`)

// parseIgnore parses the text of a .funcignore as
// GitIgnoreParser's constructor does: lines trimmed, "#" lines and empty
// ones dropped, a leading "!" making the pattern a negative one, then one
// leading "/" dropped.
func parseIgnore(text string) *ignoreParser {
	var positive, negative []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		if neg {
			line = line[1:]
		}
		line = strings.TrimPrefix(line, "/")
		if neg {
			negative = append(negative, line)
		} else {
			positive = append(positive, line)
		}
	}
	return &ignoreParser{positive: alternation(positive), negative: alternation(negative)}
}

// alternation is GitIgnoreParser's combined expression of a list of
// patterns: one alternation anchored at the start and closed by a word
// boundary. Core Tools sorts the patterns first, which cannot change
// whether an alternation matches. RE2 and .NET's ECMAScript mode agree on
// everything the translation produces: an ASCII \b, and a "." that stops
// at a newline.
func alternation(patterns []string) *regexp.Regexp {
	if len(patterns) == 0 {
		return regexp.MustCompile(`$^`)
	}
	parts := make([]string, len(patterns))
	for i, p := range patterns {
		parts[i] = translate(p)
	}
	return regexp.MustCompile(`^((` + strings.Join(parts, `)|(`) + `))\b`)
}

// translate is GitIgnoreParser.PrepareRegexPattern: the specials escaped,
// "**" any run of characters, "*" one or more characters but "/".
func translate(pattern string) string {
	p := regexpSpecials.ReplaceAllString(pattern, `\$0`)
	p = strings.ReplaceAll(p, "**", "(.+)")
	return strings.ReplaceAll(p, "*", `([^\/]+)`)
}

// accepts reports whether the file at path (relative to the app root,
// with forward slashes) goes into the package: GitIgnoreParser.Accepts.
func (p *ignoreParser) accepts(path string) bool {
	if path == "/" {
		path = ""
	}
	return p.negative.MatchString(path) || !p.positive.MatchString(path)
}
