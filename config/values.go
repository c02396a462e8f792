package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
)

// sizeUnits are the accepted size suffixes, matched case-insensitively.
// KB, MB and GB are decimal, KiB, MiB and GiB binary.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kb":  1000,
	"mb":  1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
}

// parseSize parses a whole number of bytes with an optional unit: "1048576",
// "64MiB", "64 MiB", "1MB". Fractions and signs are not accepted.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("size does not start with a digit")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, err
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, fmt.Errorf("unknown size unit %q", s[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("size overflows")
	}
	return n * mult, nil
}

// formatSize writes n with the largest binary unit that divides it exactly,
// so that defaults read as they were written (64MiB, 1000012).
func formatSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// splitList splits a comma-separated list, trimming spaces around items and
// dropping empty ones (a trailing comma is harmless).
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// hostPortProblem says what is wrong with a host:port address, or "".
// needHost: a broker needs a host and a non-zero port; a listen address
// may omit the host (":9187") and use port 0.
func hostPortProblem(s string, needHost bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return ae.Err
		}
		return err.Error()
	}
	if needHost && host == "" {
		return "the host is empty"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (needHost && p == 0) {
		return "the port must be a number from 1 to 65535"
	}
	return ""
}
