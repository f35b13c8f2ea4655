package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// Config is the whole configuration of one consumer process. The YAML keys
// are the snake_case names in the field tags; every field's doc states its
// default. Load and Parse return a Config with the defaults filled in.
//
// A Config is a plain value: Validate and Explain only read it, and may be
// called concurrently; LoadEnv changes it.
type Config struct {
	// DataDir is the directory the embedded NATS server and the Badger
	// database (ledger and LLM cache) keep their data below. The default
	// is "./oncegate-data".
	DataDir string `yaml:"data_dir"`

	NATS      NATS       `yaml:"nats"`
	Ledger    Ledger     `yaml:"ledger"`
	LLM       LLM        `yaml:"llm"`
	Metrics   Metrics    `yaml:"metrics"`
	Log       Log        `yaml:"log"`
	Stream    Stream     `yaml:"stream"`
	Pipelines []Pipeline `yaml:"pipelines"`
	Ingress   Ingress    `yaml:"ingress"`
	Tracing   Tracing    `yaml:"tracing"`
	// Proxy configures the OpenAI-compatible proxy; see proxy.go. It is
	// off by default.
	Proxy   Proxy   `yaml:"proxy"`
	Admin   Admin   `yaml:"admin"`
	Console Console `yaml:"console"`
	// Encryption configures encryption at rest of the Badger stores; see
	// encryption.go. The default is none.
	Encryption Encryption `yaml:"encryption"`

	// meta records where each value came from: a line of the file, an
	// environment variable, or nowhere (a default). Nil for a Config built
	// in Go.
	meta *meta
}

// BadgerDir is the directory of the Badger database that holds the ledger
// (when Ledger.Store is StoreBadger) and the LLM cache: DataDir/badger.
func (c *Config) BadgerDir() string { return filepath.Join(c.DataDir, "badger") }

// Load reads the configuration file at path and returns the effective
// configuration: the file, overridden by the ONCEGATE_* variables of the
// process environment (see Config.LoadEnv), with the defaults filled in,
// validated. An empty path means the built-in demo configuration (see
// Default).
//
// The error joins every problem found, each a *FieldError. If only
// validation failed, the Config is returned too, so that a checker can
// still explain it.
func Load(path string) (*Config, error) {
	if path == "" {
		return parseDefault(os.Environ())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseEnv(data, path, os.Environ())
}

// Parse decodes a configuration document, fills in the defaults and
// validates the result; name is the file name to report problems against.
// It does not consult the environment. Keys the Config does not have are
// errors (ErrUnknownKey) that name the key and its line.
//
// Like Load, Parse returns the Config along with the error when only
// validation failed.
func Parse(data []byte, name string) (*Config, error) {
	return ParseEnv(data, name, nil)
}

// ParseEnv is Parse with the overrides of environ (in the form of
// os.Environ) applied, as Load applies the process environment's.
func ParseEnv(data []byte, name string, environ []string) (*Config, error) {
	c, issues := decode(data, name)
	if issues != nil {
		return nil, c.fieldErrors(issues)
	}
	return c.finish(environ)
}

// finish applies environ and the defaults to a decoded c and validates it.
func (c *Config) finish(environ []string) (*Config, error) {
	if err := c.LoadEnv(environ); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen is the address of the metrics, health and readiness
	// endpoints. The default is "127.0.0.1:9464"; an explicit empty
	// string ("") disables them.
	Listen string `yaml:"listen"`
}

// Log formats and levels.
const (
	LogText = "text"
	LogJSON = "json"
)

// Log configures the structured log.
type Log struct {
	// Format is LogText (the default) or LogJSON.
	Format string `yaml:"format"`
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Outcomes adds an INFO line per trigger's outcome, and per one-shot
	// effect's, for people who read logs: msg=outcome with its pipeline,
	// key, route, effect and result (done, the target had it, no effect,
	// dead and the reason). Off by default: the metrics count them.
	Outcomes bool `yaml:"outcomes"`
}

// Defaults of the top-level settings.
const (
	DefaultDataDir       = "./oncegate-data"
	DefaultMetricsListen = "127.0.0.1:9464"
)

func (v *validator) top() {
	if v.c.DataDir == "" {
		v.add("data_dir", missing("a directory is required"))
	}
	if l := v.c.Metrics.Listen; l != "" {
		if err := checkListen(l, false); err != nil {
			v.add("metrics.listen", err)
		}
	}
	v.oneOf("log.format", v.c.Log.Format, LogText, LogJSON)
	v.oneOf("log.level", v.c.Log.Level, "debug", "info", "warn", "error")
}

// metrics explains the metrics section.
func (x *explainer) metrics() {
	c := x.c
	metrics := "disabled"
	if c.Metrics.Listen != "" {
		metrics = "http://" + c.Metrics.Listen + "/metrics, health and readiness endpoints"
	}
	x.row("metrics", x.d("metrics.listen", c.Metrics.Listen, metrics))
}

// log explains the log section.
func (x *explainer) log() {
	c := x.c
	x.row("log", x.d("log.format", c.Log.Format, c.Log.Format)+", level "+x.d("log.level", c.Log.Level, c.Log.Level))
}
