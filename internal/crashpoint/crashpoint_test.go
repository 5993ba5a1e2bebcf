package crashpoint

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const childEnv = "IDEM_CRASHPOINT_TEST_CHILD"

// A child of this test binary: it hits "p" three times, saying so after
// each hit it survived.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		for i := 1; i <= 3; i++ {
			Hit("p")
			os.Stdout.WriteString("survived hit " + string(rune('0'+i)) + "\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A test binary arms its points from the environment: the child dies at
// the armed (second) hit, and nothing after it runs.
func TestTestBinaryIsArmedByEnv(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1", EnvVar+"=other,p:2")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL; output:\n%s", err, out)
	}
	if got, want := string(out), "survived hit 1\n"; got != want {
		t.Fatalf("child printed %q, want %q", got, want)
	}
}

// An ordinary program that imports idem ignores the environment variable:
// with every point armed, it runs Ledger.Do and hits every other point,
// and lives.
func TestProgramIgnoresEnv(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "survivor")
	build := exec.Command("go", "build", "-o", bin, "./testdata/survivor")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	all := []string{AfterClaim, AfterCall, BeforeCommit, AfterCommit, MidResponse, AfterDelivery, MidBatch,
		JobAfterClaim, JobBeforeCommit, JobAfterCommit}
	cmd := exec.Command(bin, dir)
	cmd.Env = append(os.Environ(), EnvVar+"="+strings.Join(all, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("survivor: %v\nstderr:\n%s", err, stderr.String())
	}
	if got, want := string(out), "survived: done\n"; got != want {
		t.Fatalf("survivor printed %q, want %q", got, want)
	}
}

// Arm parses the EnvVar syntax; an empty spec disarms.
func TestArm(t *testing.T) {
	t.Cleanup(func() { Arm("") })
	Arm(" a , b:3,c:x, ,d:0")
	want := map[string]int{"a": 1, "b": 3, "c": 1, "d": 1}
	if len(left) != len(want) {
		t.Fatalf("armed %v, want %v", left, want)
	}
	for k, n := range want {
		if left[k] != n {
			t.Fatalf("armed %v, want %v", left, want)
		}
	}
	if !armed.Load() {
		t.Fatal("not armed")
	}
	Hit("b") // the first of three: survives
	if left["b"] != 2 {
		t.Fatalf("b has %d hits left, want 2", left["b"])
	}
	Arm("")
	if armed.Load() {
		t.Fatal("still armed after Arm(\"\")")
	}
}
