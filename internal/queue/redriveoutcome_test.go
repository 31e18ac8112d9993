package queue

import "testing"

func TestRedriveTaskOf(t *testing.T) {
	for key, want := range map[string]string{
		RedriveTaskKey("dlq", 7, "rd-0abc"): "rd-0abc",
		RedriveKey("dlq", 7):                "",
		SourceKey("max_attempts", "q", 7):   "",
		ImportKey(0, "a~b"):                 "",
		"":                                  "",
	} {
		if got := RedriveTaskOf(key); got != want {
			t.Errorf("RedriveTaskOf(%q) = %q, want %q", key, got, want)
		}
	}
	if got := OnceKey(RedriveTaskKey("dlq", 7, "rd-0abc")); got != RedriveKey("dlq", 7) {
		t.Errorf("OnceKey of a task key = %q, want the dead item's redrive key", got)
	}
	if got := OnceKey(RedriveKey("dlq", 7)); got != RedriveKey("dlq", 7) {
		t.Errorf("OnceKey of a redrive key = %q, want it unchanged", got)
	}
	if _, q := ParseSourceKey(RedriveTaskKey("dlq", 7, "rd-0abc")); q != "dlq" {
		t.Errorf("ParseSourceKey of a task key: queue %q, want dlq", q)
	}
}
