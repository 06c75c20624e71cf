package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// Every property qbctl takes from meta.Properties is a field of the SDK's properties
// struct of each kind it is offered for, of the type its flag parses into; and every
// scalar field of those structs has a flag, so the SDK offers nothing qbctl cannot set.
func TestPropertyFlagsMatchTheSDK(t *testing.T) {
	want := map[propKind]reflect.Type{propDuration: reflect.TypeOf((*string)(nil)), propInt32: reflect.TypeOf((*int32)(nil)),
		propInt64: reflect.TypeOf((*int64)(nil)), propBool: reflect.TypeOf((*bool)(nil)), propString: reflect.TypeOf((*string)(nil)),
		propStatus: reflect.TypeOf((*admin.EntityStatus)(nil))}
	covered := map[entityKind]map[string]bool{}
	for _, s := range propSpecs {
		for _, k := range s.kinds {
			f, ok := sdkTypes[k].FieldByName(s.name)
			if !ok || f.Type != want[s.kind] {
				t.Errorf("--%s: the SDK's %v.%s is %v, want %v", s.flag, sdkTypes[k], s.name, f.Type, want[s.kind])
			}
			if covered[k] == nil {
				covered[k] = map[string]bool{}
			}
			covered[k][s.name] = true
		}
	}
	for k, rt := range sdkTypes {
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() != reflect.Struct && !covered[k][f.Name] {
				t.Errorf("%v.%s has no %s flag", rt, f.Name, k)
			}
		}
	}
}

// docs/qbctl.md's table of property flags lists exactly the flags of each kind.
func TestDocsListEveryPropertyFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/qbctl.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "Property flags")
	j := strings.Index(doc[max(i, 0):], "\n\n|")
	if i < 0 || j < 0 {
		t.Fatal("docs/qbctl.md: no table after \"Property flags\"")
	}
	doc = doc[i+j+2:]
	doc = doc[:strings.Index(doc+"\n\n", "\n\n")]
	row := regexp.MustCompile("(?m)^\\| (`--[^|]*) \\|([^|]*)\\|([^|]*)\\|([^|]*)\\|$")
	flagRE := regexp.MustCompile("`--([a-z-]+)")
	listed := map[string][]entityKind{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		var kinds []entityKind
		for c, k := range []entityKind{kindQueue, kindTopic, kindSubscription} {
			if strings.Contains(m[2+c], "✓") {
				kinds = append(kinds, k)
			}
		}
		for _, f := range flagRE.FindAllStringSubmatch(m[1], -1) {
			listed[f[1]] = kinds
		}
	}
	for _, s := range propSpecs {
		if got, ok := listed[s.flag]; !ok || !reflect.DeepEqual(got, s.kinds) {
			t.Errorf("docs/qbctl.md: --%s listed for %v, qbctl has it for %v", s.flag, got, s.kinds)
		}
		delete(listed, s.flag)
	}
	for f := range listed {
		t.Errorf("docs/qbctl.md lists --%s, which is no property flag", f)
	}
}
