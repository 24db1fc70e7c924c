package server

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ortserve/ortserve/models"
)

// The embedding fields reach the model as EmbedOptions on every embedding route, with the
// server's default prompt as the fallback; the model's refusals are answered in the
// route's shape (the fake refuses prompts but "query" and dimensions over 3).
func TestEmbedOptions(t *testing.T) {
	emb := &fakeModel{task: models.TaskEmbed}
	cfg := DefaultConfig()
	cfg.DefaultPromptName = "query"
	s := New(cfg, compatRepo{fakeRepo{"emb": emb}}, slog.New(slog.DiscardHandler), nil)
	s.SetReady(true)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	two := 2
	tests := []struct {
		name, path, body string
		code             int
		want             models.EmbedOptions // on a 200
		body200          string              // a substring of the answer
	}{
		{"embed, defaults", "/embed", `{"inputs":"a"}`, 200, models.EmbedOptions{Truncate: true, Normalize: true, FallbackPrompt: "query"}, `[[0.70710677,0.70710677,0]]`},
		{"embed, every field", "/embed", `{"inputs":"a","prompt_name":"query","dimensions":2,"normalize":false,"truncate":false,"truncation_direction":"Right"}`, 200, models.EmbedOptions{Prompt: "query", FallbackPrompt: "query", Dimensions: two}, `[[1,1]]`},
		{"root", "/", `{"inputs":"a","prompt_name":"query","dimensions":2,"truncation_direction":"right"}`, 200, models.EmbedOptions{Truncate: true, Normalize: true, Prompt: "query", FallbackPrompt: "query", Dimensions: two}, `[[0.70710677,0.70710677]]`},
		{"openai", "/v1/embeddings", `{"input":"a","model":"emb","prompt_name":"query","dimensions":2,"user":"u","encoding_format":"float"}`, 200, models.EmbedOptions{Truncate: true, Normalize: true, Prompt: "query", FallbackPrompt: "query", Dimensions: two}, `"embedding":[0.70710677,0.70710677]`},
		{"embed, unknown prompt", "/embed", `{"inputs":"a","prompt_name":"doc"}`, 422, models.EmbedOptions{}, `{"error":"prompt_name doc is not one of the fake's prompts: query","error_type":"Validation"}`},
		{"embed, dimensions -1", "/embed", `{"inputs":"a","dimensions":-1}`, 422, models.EmbedOptions{}, `"error_type":"Validation"`},
		{"embed, dimensions a string", "/embed", `{"inputs":"a","dimensions":"2"}`, 422, models.EmbedOptions{}, `bad JSON body`},
		{"embed, truncation_direction left", "/embed", `{"inputs":"a","truncation_direction":"left"}`, 200, models.EmbedOptions{Truncate: true, Left: true, Normalize: true, FallbackPrompt: "query"}, `[[0.70710677,0.70710677,0]]`},
		{"embed, truncation_direction up", "/embed", `{"inputs":"a","truncation_direction":"up"}`, 422, models.EmbedOptions{}, `"truncation_direction \"up\" is not one of`},
		{"openai, unknown prompt", "/v1/embeddings", `{"input":"a","model":"emb","prompt_name":"doc"}`, 400, models.EmbedOptions{}, `"param":"prompt_name"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emb.seenOpts = models.EmbedOptions{}
			resp, body := post(t, ts.URL+tt.path, tt.body)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.body200) {
				t.Fatalf("%d %s, want %d with %s", resp.StatusCode, body, tt.code, tt.body200)
			}
			if tt.code == 200 && emb.seenOpts != tt.want {
				t.Errorf("options %+v, want %+v", emb.seenOpts, tt.want)
			}
		})
	}
}

// GET /v1/models lists each model and each of its versions, in OpenAI's list shape, and
// GET /v1/models/{id} answers one of them, an id with a '/' included.
func TestOpenAIModels(t *testing.T) {
	ts, _ := newCompatServer(t, fakeRepo{"emb": {task: models.TaskEmbed}, "cls": {task: models.TaskClassify}})
	code, body := getURL(t, ts.URL+"/v1/models")
	var list OpenAIModelList
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.Object != "model" || m.OwnedBy != "ortserve" || m.Created <= 0 {
			t.Errorf("%+v", m)
		}
		ids = append(ids, m.ID)
	}
	if want := []string{"cls", "cls/v1", "emb", "emb/v1"}; list.Object != "list" || !slices.Equal(ids, want) {
		t.Errorf("%s %v, want list %v", list.Object, ids, want)
	}
	for _, tt := range []struct {
		id   string
		code int
		want string
	}{
		{"emb/v1", 200, `"id":"emb/v1","object":"model"`},
		{"emb", 200, `"id":"emb"`},
		{"emb/v9", 404, `"code":"model_not_found"`},
	} {
		if code, body := getURL(t, ts.URL+"/v1/models/"+tt.id); code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s, want %d with %s", tt.id, code, body, tt.code, tt.want)
		}
	}
}
