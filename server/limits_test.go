package server

import (
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// Every route that takes texts holds them to max_input_chars the same way: cut when the
// request truncates, 413 naming the limit and the input otherwise.
func TestMaxInputChars(t *testing.T) {
	const over = `input 1 has 7 characters, over the limit of 5 (max_input_chars)`
	tests := []struct {
		name, path, body string
		autoTruncate     bool
		code             int
		want             string   // in the body
		seen             []string // texts the model got; nil: not called
	}{
		{"embed under", "/embed", `{"inputs":["abc","héllo"]}`, true, 200, "", []string{"abc", "héllo"}},
		{"embed cut by default", "/embed", `{"inputs":["abc","abcdefg"]}`, true, 200, "", []string{"abc", "abcde"}},
		{"embed cut by characters, not bytes", "/embed", `{"inputs":["x","ééééééé"]}`, true, 200, "", []string{"x", "ééééé"}},
		{"embed refused", "/embed", `{"inputs":["abc","abcdefg"],"truncate":false}`, true, 413, over, nil},
		{"embed refused by default", "/embed", `{"inputs":["abc","abcdefg"]}`, false, 413, `shorten it or send \"truncate\": true`, nil},
		{"embed cut on request", "/embed", `{"inputs":["abc","abcdefg"],"truncate":true}`, false, 200, "", []string{"abc", "abcde"}},
		{"predict cut", "/predict", `{"inputs":[["abc"],["abcdefg"]]}`, true, 200, "", []string{"abc", "abcde"}},
		{"predict refused", "/predict", `{"inputs":[["abc"],["abcdefg"]],"truncate":false}`, true, 413, over, nil},
		{"openai cut", "/v1/embeddings", `{"model":"emb","input":["abc","abcdefg"]}`, true, 200, "", []string{"abc", "abcde"}},
		{"openai refused", "/v1/embeddings", `{"model":"emb","input":["abc","abcdefg"]}`, false, 413, over, nil},
		{"kserve cut", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["abc","abcdefg"]}]}`, true, 200, "", []string{"abc", "abcde"}},
		{"kserve refused", "/v2/models/emb/infer", `{"inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["abc","abcdefg"]}],"parameters":{"truncate":false}}`, true, 413, over, nil},
		{"tokenize cut", "/tokenize", `{"inputs":["abc","abcdefg"]}`, true, 200, `"text":"abcde"`, nil},
		{"tokenize refused", "/tokenize", `{"inputs":["abc","abcdefg"]}`, false, 413, over, nil},
		{"count before characters", "/embed", `{"inputs":["a","b","c","d","abcdefg"]}`, true, 413, "5 inputs is over the limit of 4", nil},
		{"predict pair cut", "/predict", `{"inputs":[["abc"],["abcdefg","xyzxyzx"]]}`, true, 200, "", []string{"abc", "abcde", "xyzxy"}},
		{"predict pair refused", "/predict", `{"inputs":[["abc"],["abc","abcdefg"]],"truncate":false}`, true, 413, "input 1's second text has 7 characters, over the limit of 5", nil},
		{"predict pairs counted as one each", "/predict", `{"inputs":[["a","b"],["a","b"],["a","b"],["a","b"],["a","b"]]}`, true, 413, "5 inputs is over the limit of 4", nil},
		{"rerank cut", "/rerank", `{"query":"qqqqqqq","texts":["abc","abcdefg"]}`, true, 200, "", []string{"abc", "abcde"}},
		{"rerank text refused", "/rerank", `{"query":"q","texts":["abc","abcdefg"],"truncate":false}`, true, 413, "texts[1] has 7 characters, over the limit of 5", nil},
		{"rerank query refused", "/rerank", `{"query":"qqqqqqq","texts":["abc"]}`, false, 413, "query has 7 characters, over the limit of 5", nil},
		{"rerank count", "/rerank", `{"query":"q","texts":["a","b","c","d","e"]}`, true, 413, "5 texts is over the limit of 4", nil},
		{"v1 rerank cut", "/v1/rerank", `{"query":"q","documents":["abc",{"text":"abcdefg"}]}`, true, 200, "", []string{"abc", "abcde"}},
		{"v1 rerank refused", "/v1/rerank", `{"query":"q","documents":["abc",{"text":"abcdefg"}]}`, false, 413, "documents[1] has 7 characters, over the limit of 5", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}, "rr": {task: models.TaskRerank}}
			cfg := DefaultConfig()
			cfg.MaxInputs, cfg.MaxInputChars, cfg.AutoTruncate = 4, 5, tt.autoTruncate
			s := New(cfg, compatRepo{repo}, slog.New(slog.DiscardHandler), nil)
			s.SetReady(true)
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			resp, body := post(t, ts.URL+tt.path, tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d %s, want %d containing %s", resp.StatusCode, body, tt.code, tt.want)
			}
			seen := repo["emb"].seen
			switch {
			case strings.HasPrefix(tt.path, "/predict"):
				seen = nil
				for _, in := range repo["cls"].seenInputs {
					seen = append(seen, in.Text)
					if in.Pair {
						seen = append(seen, in.Second)
					}
				}
			case strings.Contains(tt.path, "rerank"):
				seen = repo["rr"].seen
			}
			if !slices.Equal(seen, tt.seen) {
				t.Errorf("model got %q, want %q", seen, tt.seen)
			}
		})
	}
}

// Without max_input_chars no text is cut, however long.
func TestMaxInputCharsOff(t *testing.T) {
	repo := fakeRepo{"emb": {task: models.TaskEmbed}}
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 1 << 20
	s := New(cfg, repo, slog.New(slog.DiscardHandler), nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	long := strings.Repeat("word ", 20000)
	if resp, body := post(t, ts.URL+"/embed", `{"inputs":["`+long+`"],"truncate":false}`); resp.StatusCode != 200 {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if got := repo["emb"].seen; len(got) != 1 || got[0] != long {
		t.Errorf("the model got a text of %d bytes, want %d", len(got[0]), len(long))
	}
}
