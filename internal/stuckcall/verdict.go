package stuckcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Verdict is the watcher's decision to kill a process, kept on disk for
// the next process: the versions to quarantine (Culprits), or, when it
// could not name one, the calls in progress (Suspects).
type Verdict struct {
	DetectedAt time.Time `json:"detected_at"`
	// PID is the process killed.
	PID int `json:"pid"`
	// Reason says what was seen, in a sentence.
	Reason string `json:"reason"`
	// Culprits are the stuck calls, one or more of each version to
	// quarantine.
	Culprits []Call `json:"culprits,omitempty"`
	// Suspects are the calls in progress when no culprit could be named.
	Suspects []Call `json:"suspects,omitempty"`

	// Path is the file the verdict was read from.
	Path string `json:"-"`
}

// Call is one module call a verdict names.
type Call struct {
	// Module is the module's name in the process: "tenant/pipeline" for a
	// tenant pipeline's module, module.name otherwise.
	Module string `json:"module"`
	SHA256 string `json:"sha256"`
	// Deadline is the module's deadline.
	Deadline Duration `json:"deadline"`
	// StartedAt is when the call started and Ran how long it had run
	// (not counting time the process was stopped) when it was judged.
	StartedAt time.Time `json:"started_at"`
	Ran       Duration  `json:"ran"`
}

// Duration is a time.Duration written as "1.5s".
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// verdictDir is where verdicts are kept, under the directory given.
const verdictDir = "stuck-calls"

// undecidedMaxAge is how long an undecided verdict counts for Previous:
// a freeze a day later says nothing about this one.
const undecidedMaxAge = 24 * time.Hour

// Write keeps v under dir (in dir/stuck-calls/), durably: the file is
// synced and renamed into place, and the directory synced. It sets v.Path.
func Write(dir string, v *Verdict) error {
	d := filepath.Join(dir, verdictDir)
	if err := os.MkdirAll(d, 0o750); err != nil {
		return fmt.Errorf("stuck-call record: %w", err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("stuck-call record: %w", err)
	}
	name := fmt.Sprintf("%s-%d.json", v.DetectedAt.UTC().Format("20060102T150405.000000000Z"), v.PID)
	f, err := os.CreateTemp(d, ".tmp-"+name+"-*")
	if err != nil {
		return fmt.Errorf("stuck-call record: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(d, name)
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil {
		err = syncDir(d)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("stuck-call record %s: %w", path, err)
	}
	v.Path = path
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Read returns the verdicts kept under dir, oldest first. A file that is
// not a verdict is an error naming it: nothing is skipped silently.
// Leftover temporary files are removed.
func Read(dir string) ([]Verdict, error) {
	d := filepath.Join(dir, verdictDir)
	entries, err := os.ReadDir(d)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stuck-call records: %w", err)
	}
	var out []Verdict
	for _, e := range entries {
		path := filepath.Join(d, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			_ = os.Remove(path)
			continue
		case !strings.HasSuffix(e.Name(), ".json") || !e.Type().IsRegular():
			continue
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("stuck-call record: %w", err)
		}
		var v Verdict
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("stuck-call record %s: %v (remove the file if it is not sluice's)", path, err)
		}
		if err := v.check(); err != nil {
			return nil, fmt.Errorf("stuck-call record %s: %v (remove the file if it is not sluice's)", path, err)
		}
		v.Path = path
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].DetectedAt.Before(out[k].DetectedAt) })
	return out, nil
}

func (v *Verdict) check() error {
	if v.DetectedAt.IsZero() {
		return errors.New("no detected_at")
	}
	for _, c := range append(append([]Call(nil), v.Culprits...), v.Suspects...) {
		if c.Module == "" || len(c.SHA256) != 64 || strings.Trim(c.SHA256, "0123456789abcdef") != "" {
			return fmt.Errorf("a call without a module name or a sha256 of 64 lowercase hex digits (%q, %q)", c.Module, c.SHA256)
		}
	}
	return nil
}

// Undecided returns the verdicts without culprits of the last day, newest
// first: a Detector's Previous.
func Undecided(vs []Verdict, now time.Time) []Verdict {
	var out []Verdict
	for i := len(vs) - 1; i >= 0; i-- {
		if len(vs[i].Culprits) == 0 && len(vs[i].Suspects) > 0 && now.Sub(vs[i].DetectedAt) < undecidedMaxAge {
			out = append(out, vs[i])
		}
	}
	return out
}

// Remove deletes a verdict read by Read once it has been acted on.
func Remove(v Verdict) error {
	if v.Path == "" {
		return nil
	}
	if err := os.Remove(v.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stuck-call record: %w", err)
	}
	return syncDir(filepath.Dir(v.Path))
}

// Versions returns the distinct module versions (module name and sha256)
// of the verdict's culprits.
func (v *Verdict) Versions() []Call {
	seen := map[string]bool{}
	var out []Call
	for _, c := range v.Culprits {
		if !seen[c.key()] {
			seen[c.key()] = true
			out = append(out, c)
		}
	}
	return out
}
