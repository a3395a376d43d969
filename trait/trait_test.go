package trait

import "testing"

func TestValid(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"HW_CPU_X86_AVX2":  true,
		"CUSTOM_GPU_A100":  true,
		"CUSTOM_":          false,
		"CUSTOM_lower":     false,
		"HW_NOT_A_TRAIT_X": false,
		"":                 false,
	} {
		if got := Valid(name); got != want {
			t.Errorf("Valid(%q) = %v, want %v", name, got, want)
		}
	}
	if len(Standard()) < 300 {
		t.Fatalf("standard list too short: %d", len(Standard()))
	}
}
