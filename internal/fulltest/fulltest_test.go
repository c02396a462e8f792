package fulltest

import "testing"

func TestPickFollowsEnv(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        int
	}{
		{"unset", "", 1},
		{"on", "1", 2},
		{"true is on", "true", 2},
		{"zero is off", "0", 1},
		{"garbage is off", "yes please", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.value)
			if got := Pick(1, 2); got != tc.want {
				t.Errorf("%s=%q: Pick(1, 2) = %d, want %d", Env, tc.value, got, tc.want)
			}
			if got := Enabled(); got != (tc.want == 2) {
				t.Errorf("%s=%q: Enabled() = %v", Env, tc.value, got)
			}
		})
	}
}
