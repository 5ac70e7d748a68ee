package sdk

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The SDK's wire types against the daemon's /openapi.json, so the Go, Rust and Python SDKs
// cannot drift apart: for each operation the SDK uses, the request type's JSON fields must be
// exactly the request body's properties and the response type's exactly the response's,
// recursively (artifacts, limits, results, …); a property the request schema requires must be
// a field the SDK always sends (no omitempty); enums must have the schema's values. A field
// added to the API and not to the SDK fails here.

type operation struct {
	method, path string
	request      interface{} // nil: no JSON body
	status       string
	response     interface{}
}

var operations = []operation{
	{"post", "/v1/execute", ExecuteRequest{}, "200", ExecResult{}},
	{"post", "/v1/sandboxes", SandboxOptions{}, "201", SandboxInfo{}},
	{"get", "/v1/sandboxes", nil, "200", sandboxList{}},
	{"get", "/v1/sandboxes/{}", nil, "200", SandboxInfo{}},
	{"delete", "/v1/sandboxes/{}", nil, "200", destroyed{}},
	{"post", "/v1/sandboxes/{}/exec", ExecRequest{}, "200", ExecResult{}},
	{"put", "/v1/sandboxes/{}/files/{}", nil, "201", WrittenFile{}},
	{"get", "/v1/sandboxes/{}/files", nil, "200", fileList{}},
	{"post", "/v1/sandboxes/{}/contexts", createContextBody{}, "201", ContextInfo{}},
	{"get", "/v1/sandboxes/{}/contexts", nil, "200", contextList{}},
	{"get", "/v1/sandboxes/{}/contexts/{}", nil, "200", ContextInfo{}},
	{"delete", "/v1/sandboxes/{}/contexts/{}", nil, "200", destroyed{}},
	{"post", "/v1/sandboxes/{}/contexts/{}/restart", nil, "200", ContextInfo{}},
	{"get", "/readyz", nil, "200", Health{}},
	{"get", "/healthz", nil, "200", Health{}},
}

// Properties the daemon's schema leaves open (an object of any shape): not compared.
var freeForm = map[string]bool{"violation": true}

type obj = map[string]interface{}

type specT struct {
	t    *testing.T
	spec obj
}

func (s specT) resolve(schema obj) obj {
	for i := 0; i < 20; i++ {
		if ref, ok := schema["$ref"].(string); ok {
			if !strings.HasPrefix(ref, "#/components/schemas/") {
				s.t.Fatalf("unexpected $ref %s", ref)
			}
			name := ref[strings.LastIndex(ref, "/")+1:]
			schema = s.spec["components"].(obj)["schemas"].(obj)[name].(obj)
			continue
		}
		unwrapped := false
		for _, key := range []string{"allOf", "oneOf", "anyOf"} {
			list, ok := schema[key].([]interface{})
			if !ok {
				continue
			}
			var options []obj
			for _, o := range list {
				if o.(obj)["type"] != "null" {
					options = append(options, o.(obj))
				}
			}
			if len(options) == 1 {
				merged := obj{}
				for k, v := range schema {
					if k != key {
						merged[k] = v
					}
				}
				for k, v := range options[0] {
					merged[k] = v
				}
				schema, unwrapped = merged, true
				break
			}
		}
		if !unwrapped {
			return schema
		}
	}
	s.t.Fatal("unresolvable schema")
	return nil
}

func (s specT) findPath(pattern string) obj {
	re := regexp.MustCompile(`\{[^}]*\}`)
	for path, item := range s.spec["paths"].(obj) {
		if re.ReplaceAllString(path, "{}") == pattern {
			return item.(obj)
		}
	}
	s.t.Fatalf("%s is not in /openapi.json", pattern)
	return nil
}

func (s specT) jsonBody(holder obj, where string) obj {
	content, _ := holder["content"].(obj)
	body, ok := content["application/json"].(obj)
	if !ok {
		s.t.Fatalf("%s: no JSON body", where)
	}
	return s.resolve(body["schema"].(obj))
}

// jsonFields are a struct's JSON names, their Go types and whether they are omitempty.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || tag == "" {
			continue
		}
		out[strings.Split(tag, ",")[0]] = f
	}
	return out
}

func keys(m interface{}) []string {
	var out []string
	for _, k := range reflect.ValueOf(m).MapKeys() {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

var enumTypes = map[reflect.Type][]string{
	reflect.TypeOf(Reason("")): func() []string {
		var out []string
		for _, r := range Reasons {
			out = append(out, string(r))
		}
		return out
	}(),
}

func (s specT) enumValues(schema obj) []string {
	var out []string
	if list, ok := schema["enum"].([]interface{}); ok {
		for _, v := range list {
			out = append(out, v.(string))
		}
	}
	if list, ok := schema["oneOf"].([]interface{}); ok {
		for _, o := range list {
			if c, ok := o.(obj)["const"].(string); ok {
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (s specT) compare(t reflect.Type, schema obj, where string, request bool) {
	s.t.Helper()
	schema = s.resolve(schema)
	props, _ := schema["properties"].(obj)
	fields := jsonFields(t)
	if got, want := keys(fields), keys(props); !reflect.DeepEqual(got, want) {
		s.t.Errorf("%s: the SDK's %s has %v, the daemon's schema has %v", where, t.Name(), got, want)
		return
	}
	required := map[string]bool{}
	if list, ok := schema["required"].([]interface{}); ok {
		for _, r := range list {
			required[r.(string)] = true
		}
	}
	for name, f := range fields {
		if request && required[name] && strings.Contains(f.Tag.Get("json"), "omitempty") {
			s.t.Errorf("%s.%s: required by the daemon, omitempty in the SDK", where, name)
		}
		prop := s.resolve(props[name].(obj))
		ft := f.Type
		for ft.Kind() == reflect.Ptr {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 {
			ft = ft.Elem()
			items, _ := prop["items"].(obj)
			prop = s.resolve(items)
		}
		if values, ok := enumTypes[ft]; ok {
			sort.Strings(values)
			if got := s.enumValues(prop); !reflect.DeepEqual(got, values) {
				s.t.Errorf("%s.%s: enum values: schema %v, SDK %v", where, name, got, values)
			}
		}
		if ft.Kind() == reflect.Struct && !freeForm[name] {
			s.compare(ft, prop, where+"."+name, request)
		}
	}
}

func openAPISpec(t *testing.T) specT {
	c := testClient(t)
	spec, err := c.OpenAPI(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return specT{t: t, spec: spec}
}

func TestTypesMatchTheDaemonsOpenAPI(t *testing.T) {
	s := openAPISpec(t)
	for _, op := range operations {
		where := strings.ToUpper(op.method) + " " + op.path
		item := s.findPath(op.path)
		o, ok := item[op.method].(obj)
		if !ok {
			t.Errorf("%s is not in /openapi.json", where)
			continue
		}
		if op.request != nil {
			rb, _ := o["requestBody"].(obj)
			s.compare(reflect.TypeOf(op.request), s.jsonBody(rb, where+" request"), where+" request", true)
		}
		responses := o["responses"].(obj)
		r, ok := responses[op.status].(obj)
		if !ok {
			t.Errorf("%s: no %s response in the schema (has %v)", where, op.status, keys(responses))
			continue
		}
		s.compare(reflect.TypeOf(op.response), s.jsonBody(r, where+" "+op.status), where+" "+op.status, false)
	}
}

func TestStreamEventsMatchTheDaemonsOpenAPI(t *testing.T) {
	s := openAPISpec(t)
	o := s.findPath("/v1/execute")["post"].(obj)
	content := o["responses"].(obj)["200"].(obj)["content"].(obj)
	events := s.resolve(content["application/x-ndjson"].(obj)["schema"].(obj))
	var kinds []string
	for _, v := range events["oneOf"].([]interface{}) {
		variant := v.(obj)
		kind := variant["properties"].(obj)["type"].(obj)["const"].(string)
		kinds = append(kinds, kind)
		body := variant
		if ref, ok := variant["$ref"]; ok {
			base := s.resolve(obj{"$ref": ref})
			props := obj{}
			for k, v := range base["properties"].(obj) {
				props[k] = v
			}
			delete(variant["properties"].(obj), "type")
			body = obj{"properties": props, "required": base["required"]}
		} else {
			props := obj{}
			for k, v := range variant["properties"].(obj) {
				if k != "type" {
					props[k] = v
				}
			}
			body = obj{"properties": props, "required": variant["required"]}
		}
		var model interface{}
		switch EventType(kind) {
		case EventStdout, EventStderr:
			model = struct {
				Text      string `json:"text"`
				Timestamp int64  `json:"timestamp"`
			}{}
			// chunkEvent's fields beside its type.
			if f := jsonFields(reflect.TypeOf(chunkEvent{})); len(f) != 3 {
				t.Errorf("chunkEvent: %v", keys(f))
			}
		case EventEnd:
			model = ExecResult{}
		case EventError:
			model = struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			}{}
			if f := jsonFields(reflect.TypeOf(errorEvent{})); len(f) != 3 {
				t.Errorf("errorEvent: %v", keys(f))
			}
		default:
			t.Errorf("the daemon streams %q events, which the SDK does not know", kind)
			continue
		}
		s.compare(reflect.TypeOf(model), body, "event "+kind, false)
	}
	sort.Strings(kinds)
	var known []string
	for _, k := range EventTypes {
		known = append(known, string(k))
	}
	sort.Strings(known)
	if !reflect.DeepEqual(kinds, known) {
		t.Errorf("event kinds: daemon %v, SDK %v", kinds, known)
	}
}

func TestErrorBodiesMatchTheDaemonsOpenAPI(t *testing.T) {
	s := openAPISpec(t)
	for _, p := range [][2]string{{"/v1/execute", "post"}, {"/v1/sandboxes", "post"}, {"/v1/sandboxes/{}/exec", "post"}, {"/v1/sandboxes/{}/contexts", "post"}} {
		o := s.findPath(p[0])[p[1]].(obj)
		body := s.jsonBody(o["responses"].(obj)["default"].(obj), p[0])
		s.compare(reflect.TypeOf(errorBody{}), body, p[1]+" "+p[0]+" error", false)
		detail := s.resolve(body["properties"].(obj)["error"].(obj))
		v := s.resolve(detail["properties"].(obj)["violation"].(obj))
		if v["additionalProperties"] == false {
			t.Errorf("violation is no longer free-form: %v", v)
		}
	}
}

// The drift check itself: a field the SDK lacks is reported.
func TestTheDriftCheckCatchesAMissingField(t *testing.T) {
	inner := &testing.T{}
	s := specT{t: inner, spec: obj{}}
	schema := obj{"properties": obj{"path": obj{"type": "string"}, "size": obj{"type": "integer"}, "new_field": obj{"type": "string"}}}
	done := make(chan struct{})
	go func() { defer close(done); s.compare(reflect.TypeOf(WrittenFile{}), schema, "test", false) }()
	<-done
	if !inner.Failed() {
		t.Fatal("a property missing from the SDK was not reported")
	}
}
