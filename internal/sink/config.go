package sink

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
)

// FromConfig returns the sink an effect's configuration describes: the
// target a pipeline's effect goes to (for a one-shot effect, the sink its
// dispatcher sends with). Secret header values come from the environment
// variables the configuration names; a variable that is not set is an
// error.
func FromConfig(js jetstream.Publisher, e *config.Effect) (Sink, error) {
	switch e.Sink {
	case config.SinkJetStream:
		return NewJetStream(js, JetStreamOptions{Subject: e.Subject})
	case config.SinkHTTP:
		h := map[string]string{}
		for name, env := range e.HeadersEnv {
			v, ok := os.LookupEnv(env)
			if !ok {
				return nil, optionsError("http", "effect header %s: environment variable %s is not set", name, env)
			}
			h[name] = v
		}
		return NewHTTP(HTTPOptions{URL: e.URL, Header: h, OneShot: e.Class == config.ClassOneShot})
	case config.SinkFile:
		return NewFile(FileOptions{Dir: e.Dir})
	}
	return nil, fmt.Errorf("sink: unknown sink %q", e.Sink)
}
