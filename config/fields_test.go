package config

import (
	"reflect"
)

// diffFields lists the leaf fields (Columns.ID style for nested ones) that
// differ between a and b.
func diffFields(a, b Config) []string {
	var out []string
	walkFields(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	return out
}

func walkFields(a, b reflect.Value, prefix string, out *[]string) {
	for i := range a.NumField() {
		f := a.Type().Field(i)
		name := prefix + f.Name
		if f.Type.Kind() == reflect.Struct {
			walkFields(a.Field(i), b.Field(i), name+".", out)
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			*out = append(*out, name)
		}
	}
}

func allFields() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, prefix+f.Name+".")
				continue
			}
			out = append(out, prefix+f.Name)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}
