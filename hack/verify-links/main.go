// Command verify-links checks the relative links of every Markdown file git
// tracks: the file or folder a link names is tracked, and a #anchor names a
// heading of the target page, with the slug GitHub gives it. External links
// (http, https, mailto...) are not fetched: the check runs offline and its
// result does not depend on someone else's site. `make verify` runs it.
package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

func main() {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify-links: git ls-files:", err)
		os.Exit(2)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	problems, err := check(files, os.ReadFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify-links:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("%d broken relative link(s) or anchor(s)\n", len(problems))
		os.Exit(1)
	}
}

// check reads every *.md among files (paths relative to the repository's
// root, as git prints them) and returns one line per broken link, sorted.
// A link may name any tracked file or a folder that holds one; an untracked
// file on this machine does not count, as it is not in a fresh clone.
func check(files []string, read func(string) ([]byte, error)) ([]string, error) {
	tracked := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			tracked[d] = true
		}
	}
	pages := map[string][]byte{}
	page := func(name string) ([]byte, error) {
		if b, ok := pages[name]; ok {
			return b, nil
		}
		b, err := read(name)
		if err != nil {
			return nil, err
		}
		pages[name] = b
		return b, nil
	}
	var problems []string
	for _, f := range files {
		if !strings.HasSuffix(strings.ToLower(f), ".md") {
			continue
		}
		src, err := page(f)
		if err != nil {
			return nil, err
		}
		for _, l := range links(src) {
			p, err := checkLink(f, l.target, tracked, page)
			if err != nil {
				return nil, err
			}
			if p != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.target, p))
			}
		}
	}
	sort.Strings(problems)
	return problems, nil
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkLink returns what is wrong with the link target found in the page
// from, or "" when nothing is.
func checkLink(from, target string, tracked map[string]bool, page func(string) ([]byte, error)) (string, error) {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "", nil // external: not fetched
	}
	file, anchor, hasAnchor := strings.Cut(target, "#")
	if i := strings.IndexByte(file, '?'); i >= 0 {
		file = file[:i]
	}
	name := from
	if file != "" {
		unescaped, err := url.PathUnescape(file)
		if err != nil {
			return "not a valid path: " + err.Error(), nil
		}
		if strings.HasPrefix(unescaped, "/") {
			name = path.Clean(strings.TrimPrefix(unescaped, "/")) // GitHub: the repository's root
		} else {
			name = path.Join(path.Dir(from), unescaped)
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return "points outside the repository", nil
		}
		if name != "." && !tracked[name] {
			return "no such file in the repository", nil
		}
	}
	if !hasAnchor {
		return "", nil
	}
	if !strings.HasSuffix(strings.ToLower(name), ".md") {
		// A folder shows its README.md; other files have no headings
		// (GitHub's #L10 line anchors are not checked).
		if !tracked[path.Join(name, "README.md")] {
			return "", nil
		}
		name = path.Join(name, "README.md")
	}
	src, err := page(name)
	if err != nil {
		return "", err
	}
	if anchor == "" {
		return "", nil
	}
	if !anchors(src)[anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", name, anchor), nil
	}
	return "", nil
}

type link struct {
	target string
	line   int
}

var (
	fence     = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	atx       = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	closing   = regexp.MustCompile(`(?:^|[ \t]+)#+$`)
	inline    = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	reference = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	html      = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:href|src)\s*=\s*["']([^"']*)["']`)
	htmlID    = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:id|name)\s*=\s*["']([^"']*)["']`)
	tag       = regexp.MustCompile(`<[^>]*>`)
)

// lines calls fn for every line of src outside fenced code blocks, with
// inline code spans blanked out, so that neither counts as a link or a
// heading. raw is the line as written (for headings, whose code spans are
// part of their text).
func lines(src []byte, fn func(n int, line, raw string)) {
	var open string
	for i, raw := range strings.Split(string(src), "\n") {
		raw = strings.TrimRight(raw, "\r")
		if m := fence.FindStringSubmatch(raw); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(raw), m[1][:1])) == "":
				open = ""
			}
			continue
		}
		if open != "" {
			continue
		}
		fn(i+1, blankCode(raw), raw)
	}
}

// blankCode replaces the code spans of a line with spaces.
func blankCode(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		n := len(s[i:]) - len(strings.TrimLeft(s[i:], "`"))
		ticks := s[i : i+n]
		j := strings.Index(s[i+n:], ticks)
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(strings.Repeat(" ", n+j+n))
		s = s[i+n+j+n:]
	}
}

// links returns the targets of a page's inline links and images, reference
// definitions, and HTML href and src attributes.
func links(src []byte) []link {
	var out []link
	lines(src, func(n int, line, _ string) {
		for _, m := range inline.FindAllStringSubmatch(line, -1) {
			out = append(out, link{strings.Trim(m[2], "<>"), n})
		}
		if m := reference.FindStringSubmatch(line); m != nil {
			out = append(out, link{strings.Trim(m[1], "<>"), n})
		}
		for _, m := range html.FindAllStringSubmatch(line, -1) {
			out = append(out, link{m[1], n})
		}
	})
	return out
}

// anchors returns the anchors of a page: its headings' slugs, numbered as
// GitHub numbers repeated ones, and the id and name attributes of its HTML.
func anchors(src []byte) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	lines(src, func(_ int, line, raw string) {
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			set[m[1]] = true
		}
		m := atx.FindStringSubmatch(raw)
		if m == nil {
			return
		}
		s := slug(headingText(closing.ReplaceAllString(m[2], "")))
		base := s
		for set[s] {
			seen[base]++
			s = fmt.Sprintf("%s-%d", base, seen[base])
		}
		set[s] = true
	})
	return set
}

var emphasis = regexp.MustCompile(`(^|[^\p{L}\p{N}])_+|_+([^\p{L}\p{N}]|$)`)

// headingText is the text a heading renders as: links and images give their
// text, code spans their content, HTML tags and emphasis markers nothing.
func headingText(h string) string {
	var b strings.Builder
	for h != "" {
		i := strings.IndexByte(h, '`')
		if i < 0 {
			b.WriteString(plain(h))
			break
		}
		n := len(h[i:]) - len(strings.TrimLeft(h[i:], "`"))
		ticks := h[i : i+n]
		j := strings.Index(h[i+n:], ticks)
		if j < 0 {
			b.WriteString(plain(h))
			break
		}
		b.WriteString(plain(h[:i]))
		b.WriteString(strings.TrimSpace(h[i+n : i+n+j]))
		h = h[i+n+j+n:]
	}
	return strings.TrimSpace(b.String())
}

func plain(s string) string {
	s = inline.ReplaceAllString(s, "$1")
	s = tag.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "*", "")
	return emphasis.ReplaceAllString(s, "$1$2")
}

// slug is GitHub's anchor for a heading's text (github-slugger): lower case,
// every character dropped but letters, marks, digits, '_', '-' and spaces,
// and each space turned into '-'. Repeats are numbered by anchors.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.No, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
