package config

import (
	"slices"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{name: "plain bytes", in: "1048576", want: 1 << 20},
		{name: "B", in: "512B", want: 512},
		{name: "KiB", in: "4KiB", want: 4 << 10},
		{name: "MiB", in: "64MiB", want: 64 << 20},
		{name: "GiB", in: "2GiB", want: 2 << 30},
		{name: "KB is decimal", in: "4KB", want: 4000},
		{name: "MB is decimal", in: "1MB", want: 1_000_000},
		{name: "GB is decimal", in: "1GB", want: 1_000_000_000},
		{name: "lower case", in: "64mib", want: 64 << 20},
		{name: "space before unit", in: "64 MiB", want: 64 << 20},
		{name: "surrounding spaces", in: " 10 ", want: 10},
		{name: "zero", in: "0", want: 0},
		{name: "empty", in: "", wantErr: true},
		{name: "unit only", in: "MiB", wantErr: true},
		{name: "negative", in: "-1", wantErr: true},
		{name: "fraction", in: "1.5MiB", wantErr: true},
		{name: "unknown unit", in: "64M", wantErr: true},
		{name: "bits", in: "64Mb/s", wantErr: true},
		{name: "overflow", in: "9223372036854775807KiB", wantErr: true},
		{name: "too many digits", in: "99999999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseSize(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("parseSize(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1000012, "1000012"},
		{64 << 20, "64MiB"},
		{1536, "1536"},
		{2048, "2KiB"},
		{3 << 30, "3GiB"},
	}
	for _, tt := range tests {
		if got := formatSize(tt.in); got != tt.want {
			t.Errorf("formatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		// What formatSize writes, parseSize reads back.
		if back, err := parseSize(formatSize(tt.in)); err != nil || back != tt.in {
			t.Errorf("parseSize(formatSize(%d)) = %d, %v", tt.in, back, err)
		}
	}
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"a:1", []string{"a:1"}},
		{"a:1,b:2", []string{"a:1", "b:2"}},
		{" a:1 ,  b:2 ", []string{"a:1", "b:2"}},
		{"a:1,,b:2,", []string{"a:1", "b:2"}},
		{"", nil},
		{" , ", nil},
	}
	for _, tt := range tests {
		if got := splitList(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("splitList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
