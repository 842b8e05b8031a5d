package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// handle makes tool's handler from a typed function: the arguments are
// checked against the tool's input schema (types, required fields), decoded
// into A, fn returns the structured result and its readable text (and,
// wrapped by withContent, content blocks to show after the text), and every
// error goes through toolError — the one place errors become tool results.
//
// Schema validation is ours rather than mcp-go's WithInputSchemaValidation:
// v1.2.1 renders each failure as a Go struct ("<root>: &{Missing:[language]}"),
// where this says "missing property 'language'".
func handle[A any](cfg Config, tool mcpgo.Tool, fn func(ctx context.Context, a A) (any, string, error)) server.ToolHandlerFunc {
	schema, err := compileInputSchema(tool)
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", tool.Name, err)) // a programming error, caught by every test
	}
	return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		if err := validateArgs(schema, req); err != nil {
			cfg.Events.record(tool.Name, err)
			return toolError(cfg.Logger, tool.Name, err), nil
		}
		var a A
		if err := req.BindArguments(&a); err != nil {
			err = argErrorf("arguments do not decode: %v", err)
			cfg.Events.record(tool.Name, err)
			return toolError(cfg.Logger, tool.Name, err), nil
		}
		out, text, err := fn(withProgressToken(ctx, req), a)
		if err != nil {
			cfg.Events.record(tool.Name, err)
			return toolError(cfg.Logger, tool.Name, err), nil
		}
		if tr, ok := out.(toolResult); ok {
			res := mcpgo.NewToolResultStructured(tr.value, text)
			res.Content = append(res.Content, tr.content...)
			return res, nil
		}
		return mcpgo.NewToolResultStructured(out, text), nil
	}
}

// noArgs is the argument type of tools that take none.
type noArgs struct{}

func compileInputSchema(tool mcpgo.Tool) (*jsonschema.Schema, error) {
	raw := []byte(tool.RawInputSchema)
	if len(raw) == 0 {
		var err error
		if raw, err = json.Marshal(tool.InputSchema); err != nil {
			return nil, err
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	url := "mem:///tools/" + tool.Name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

var printer = message.NewPrinter(language.English)

// validateArgs checks the call's arguments against schema; the error lists
// each failing value by its JSON Pointer.
func validateArgs(schema *jsonschema.Schema, req mcpgo.CallToolRequest) error {
	raw := []byte(req.Params.RawArguments)
	if len(raw) == 0 {
		var err error
		if raw, err = json.Marshal(req.Params.Arguments); err != nil {
			return argErrorf("arguments are not JSON: %v", err)
		}
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = []byte("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return argErrorf("arguments are not JSON: %v", err)
	}
	err = schema.Validate(v)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return argErrorf("arguments: %v", err)
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			msg := e.ErrorKind.LocalizedString(printer)
			switch k := e.ErrorKind.(type) {
			case *kind.MinLength:
				if k.Want == 1 {
					msg = "must not be empty"
				}
			case *kind.Pattern:
				if k.Want == `\S` {
					msg = "must not be empty"
				}
			}
			if len(e.InstanceLocation) > 0 {
				msg = strings.Join(e.InstanceLocation, ".") + ": " + msg
			}
			if !slices.Contains(msgs, msg) {
				msgs = append(msgs, msg)
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return argErrorf("invalid arguments: %s", strings.Join(msgs, "; "))
}

// nonBlank marks string properties of the tool's input schema as needing
// some non-space text (minLength 1, pattern \S): the schema, which clients
// see too, says so instead of each handler checking by hand. It must follow
// WithInputSchema.
func nonBlank(names ...string) mcpgo.ToolOption {
	return func(t *mcpgo.Tool) {
		var s map[string]any
		if err := json.Unmarshal(t.RawInputSchema, &s); err != nil {
			panic(fmt.Sprintf("tool %s: nonBlank needs a raw input schema: %v", t.Name, err))
		}
		props, _ := s["properties"].(map[string]any)
		for _, n := range names {
			p, ok := props[n].(map[string]any)
			if !ok {
				panic(fmt.Sprintf("tool %s: no property %q", t.Name, n))
			}
			p["minLength"] = 1
			p["pattern"] = `\S`
		}
		raw, err := json.Marshal(s)
		if err != nil {
			panic(err)
		}
		t.RawInputSchema = raw
	}
}
