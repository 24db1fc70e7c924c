package doccheck

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Request is the HTTP request a doc's curl command sends, its server left out: a test sends
// it to its own.
type Request struct {
	Method string
	Path   string // with the query, if any
	Header http.Header
	Body   string
}

// ParseCurl reads the arguments of a curl command (after "curl") into its request. It knows
// the options the docs use: -s -S -f (no effect on the request), -X, -H, -d (--data,
// --data-raw, --data-binary) and --json; any other is an error, so that a check never sends
// other than what the doc shows.
func ParseCurl(args []string) (Request, error) {
	r := Request{Header: http.Header{}}
	var data []string
	var target string
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 == len(args) {
				return "", fmt.Errorf("curl %s has no value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch {
		case !strings.HasPrefix(a, "-"):
			if target != "" {
				return r, fmt.Errorf("curl with two URLs, %s and %s: show one a command", target, a)
			}
			target = a
		case a == "-X" || a == "--request":
			r.Method, err = value()
		case a == "-H" || a == "--header":
			if v, err = value(); err == nil {
				k, hv, ok := strings.Cut(v, ":")
				if !ok {
					return r, fmt.Errorf("curl -H %q is not Name: value", v)
				}
				r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(hv))
			}
		case a == "-d" || a == "--data" || a == "--data-raw" || a == "--data-binary":
			if v, err = value(); err == nil {
				if strings.HasPrefix(v, "@") && a != "--data-raw" {
					return r, fmt.Errorf("curl %s %s reads a file: show the body itself", a, v)
				}
				data = append(data, v)
			}
		case a == "--json":
			if v, err = value(); err == nil {
				data = append(data, v)
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Accept", "application/json")
			}
		case strings.Trim(a, "-sSf") == "" && !strings.HasPrefix(a, "--") || a == "--silent" || a == "--show-error" || a == "--fail":
		default:
			return r, fmt.Errorf("curl option %s: the docs test knows -s -S -f -X -H -d --json; show the request with those", a)
		}
		if err != nil {
			return r, err
		}
	}
	if target == "" {
		return r, fmt.Errorf("curl with no URL")
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil {
		return r, fmt.Errorf("curl URL %s: %w", target, err)
	}
	r.Path = u.EscapedPath()
	if r.Path == "" {
		r.Path = "/"
	}
	if u.RawQuery != "" {
		r.Path += "?" + u.RawQuery
	}
	if len(data) > 0 {
		r.Body = strings.Join(data, "&") // as curl joins several -d
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if r.Method == "" {
		r.Method = http.MethodGet
		if len(data) > 0 {
			r.Method = http.MethodPost
		}
	}
	return r, nil
}
