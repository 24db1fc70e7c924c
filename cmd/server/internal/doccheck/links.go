package doccheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// CheckLinks checks d's relative links, d being read from under root: the file or folder a
// link names exists, relative to d's folder (or to root, for a path starting with /), and its
// #anchor is the anchor of a heading in the Markdown file it names, d itself for a bare
// #anchor. A link with a scheme or host (https:, mailto:) is not followed, nor an anchor
// into a file that is not Markdown (#L10 into code). It returns a line per broken link.
func CheckLinks(root string, d *Doc) []string {
	var bad []string
	docs := map[string]*Doc{d.Path: d}
	for _, l := range d.Links {
		where := fmt.Sprintf("%s:%d: link %s", d.Path, l.Line, l.Dest)
		u, err := url.Parse(l.Dest)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if u.Scheme != "" || u.Host != "" {
			continue
		}
		target := d.Path
		if u.Path != "" {
			target = path.Join(path.Dir(d.Path), u.Path)
			if strings.HasPrefix(u.Path, "/") {
				target = strings.TrimPrefix(path.Clean(u.Path), "/")
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				bad = append(bad, fmt.Sprintf("%s: there is no %s", where, target))
				continue
			}
		}
		if u.Fragment == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		t, ok := docs[target]
		if !ok {
			if t, err = Read(root, target); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			docs[target] = t
		}
		if !slices.ContainsFunc(t.Headings, func(h Heading) bool { return h.Slug == u.Fragment }) {
			bad = append(bad, fmt.Sprintf("%s: no heading of %s has the anchor #%s", where, target, u.Fragment))
		}
	}
	return bad
}
