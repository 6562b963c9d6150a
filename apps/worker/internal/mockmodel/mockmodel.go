// Package mockmodel is a scripted OpenAI-compatible model server for tests:
// it serves POST /v1/responses as server-sent events, answering each request
// with the next step of a script chosen from what the conversation holds so
// far. The model is the only thing open-bot's tests fake.
package mockmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Step is one model reply: a tool call, or a final message.
type Step struct {
	Tool    string // function name; empty for a message
	Args    any    // marshalled as the call's arguments string
	Message string
}

// Output is a tool output the conversation carried back to the model.
type Output struct {
	CallID string
	Output json.RawMessage
	// Text is the output's text: the string itself, or its input_text
	// items joined.
	Text string
	// Images are the data URLs of its input_image items, in order.
	Images []string
}

// parseOutput reads a function_call_output's output: a string, or an
// array of {type:"input_text",text} and {type:"input_image",image_url}.
func parseOutput(callID string, raw json.RawMessage) Output {
	o := Output{CallID: callID, Output: raw}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		o.Text = s
		return o
	}
	var items []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL string `json:"image_url"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return o
	}
	for _, it := range items {
		switch it.Type {
		case "input_text":
			o.Text += it.Text
		case "input_image":
			o.Images = append(o.Images, it.ImageURL)
		}
	}
	return o
}

// Script picks the next step from the tool outputs so far (in order).
type Script func(outputs []Output) Step

// Server is the model server.
type Server struct {
	script Script
	// key, when set, is the API key every request must carry as a bearer
	// (the way a real provider refuses a request without its key).
	key string
	// mu guards requests and paths.
	mu       sync.Mutex
	requests int
	paths    []string
	// tools is the last request's tools array (what Codex offered).
	tools []json.RawMessage
	// exchanges records every /v1/responses request answered; onExchange,
	// when set, gets each as it is answered.
	exchanges  []Exchange
	onExchange func(Exchange)
}

// Exchange is one /v1/responses request as the server saw it: when it
// arrived and was read, the tool outputs it carried back, and the answer
// it got (a tool call or a message) and when. Benchmarks read it (the
// time from a run's start to its first request, and a tool's round trip:
// an answer asking for a call → the request carrying its output).
type Exchange struct {
	// N numbers the server's requests from 1.
	N int `json:"n"`
	// Arrived is when the handler got the request (its headers), Read
	// when its body had been read and decoded.
	Arrived time.Time `json:"arrived"`
	Read    time.Time `json:"read"`
	// Outputs are the call ids of the function_call_outputs it carried,
	// in order.
	Outputs []string `json:"outputs,omitempty"`
	// Tool and CallID are the tool call answered ("" for a message).
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"callId,omitempty"`
	// Answered is when the whole answer had been written and flushed.
	Answered time.Time `json:"answered"`
}

// OnExchange calls f with each exchange as it is answered (mockserve
// writes them where a test outside its process reads them). Call it
// before serving.
func (s *Server) OnExchange(f func(Exchange)) *Server {
	s.onExchange = f
	return s
}

// Exchanges returns the exchanges answered so far, in order.
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Exchange(nil), s.exchanges...)
}

// New returns a server following script.
func New(script Script) *Server { return &Server{script: script} }

// RequireKey makes the server answer 401 to a request without
// "Authorization: Bearer key". Call it before serving.
func (s *Server) RequireKey(key string) *Server {
	s.key = key
	return s
}

// Requests counts /v1/responses requests served.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Paths lists every path requested (to spot unexpected endpoints).
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// Tools returns the tools array of the latest request, as Codex sent it
// (to find the name and argument shape of Codex's built-in tools).
func (s *Server) Tools() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.tools...)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	s.mu.Lock()
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if s.key != "" && r.Header.Get("Authorization") != "Bearer "+s.key {
		http.Error(w, "invalid api key", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Input []json.RawMessage `json:"input"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ex := Exchange{Arrived: arrived, Read: time.Now()}
	var outs []Output
	for _, raw := range req.Input {
		var it struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(raw, &it) == nil && it.Type == "function_call_output" {
			outs = append(outs, parseOutput(it.CallID, it.Output))
			ex.Outputs = append(ex.Outputs, it.CallID)
		}
	}
	// Counted before the script runs, so a script that blocks ("thinks")
	// is already visible to a test waiting for it.
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.tools = req.Tools
	s.mu.Unlock()
	step := s.script(outs)

	respID := fmt.Sprintf("resp_%d", n)
	var item map[string]any
	if step.Tool != "" {
		args, _ := json.Marshal(step.Args)
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "call_id": fmt.Sprintf("call_%d", n), "name": step.Tool, "arguments": string(args), "status": "completed"}
	} else {
		item = map[string]any{"type": "message", "id": fmt.Sprintf("msg_%d", n), "role": "assistant", "status": "completed",
			"content": []map[string]any{{"type": "output_text", "text": step.Message, "annotations": []any{}}}}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	send("response.created", map[string]any{"response": map[string]any{"id": respID}})
	send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	send("response.completed", map[string]any{"response": map[string]any{"id": respID,
		"usage": map[string]any{"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 15}}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	ex.N, ex.Answered = n, time.Now()
	if step.Tool != "" {
		ex.Tool, ex.CallID = step.Tool, item["call_id"].(string)
	}
	s.mu.Lock()
	s.exchanges = append(s.exchanges, ex)
	s.mu.Unlock()
	if s.onExchange != nil {
		s.onExchange(ex)
	}
}

// ToolLoop is a script that asks for tool (with args) n times, one call
// per answer, then answers "done": the benchmarks' model.
func ToolLoop(tool string, args any, n int) Script {
	return func(outs []Output) Step {
		if len(outs) < n {
			return Step{Tool: tool, Args: args}
		}
		return Step{Message: "done"}
	}
}
