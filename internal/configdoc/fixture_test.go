package configdoc

import "time"

// The fixtures are config trees for the tests; their comments are part of
// them, read by Keys as it reads engine's.

// fixtureConfig has one key of each kind.
type fixtureConfig struct {
	// Name is a string. Required.
	Name string `yaml:"name"`
	// Wait is a duration. Default 1s.
	Wait time.Duration `yaml:"wait"`
	// Ratio is a number; unset, it takes the default 0.5.
	Ratio *float64 `yaml:"ratio"`
	// Items are a list of objects.
	Items []fixtureItem `yaml:"items"`
	// fixtureInline's keys are keys of this struct.
	fixtureInline `yaml:",inline"`
	// Labels map names to values.
	Labels map[string]string `yaml:"labels"`
	// Lo and Hi bound a range.
	Lo int
	Hi int
	// Skipped is not decoded.
	Skipped string `yaml:"-"`
	hidden  string
}

// fixtureItem is an element of fixtureConfig.Items.
type fixtureItem struct {
	// ID names the item. Required with items.
	ID string `yaml:"id"`
	// Tags are strings.
	Tags []string `yaml:"tags"`
	// On is a bool.
	On bool `yaml:"on"`
}

// fixtureInline's keys sit in the struct that inlines it.
type fixtureInline struct {
	// Extra is inlined.
	Extra int64 `yaml:"extra"`
}

// fixtureUndocumented has fields without comments of their own.
type fixtureUndocumented struct {
	// Lo bounds a range.
	Lo   int `yaml:"lo"`
	Hi   int `yaml:"hi"`
	Next int `yaml:"next"`

	// Documented has a comment.
	Documented string `yaml:"documented"`

	Alone string `yaml:"alone"`
}

var _ = fixtureConfig{}.hidden
