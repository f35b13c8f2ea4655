package config

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// EnvPrefix starts the name of every environment variable that overrides a
// configuration field.
const EnvPrefix = "ONCEGATE_"

// EnvAllowlist lists the ONCEGATE_* environment variables that are not
// configuration fields and yet are not typos, so LoadEnv leaves them
// alone. An entry ending in '*' matches every name with that prefix. Any
// other ONCEGATE_* variable that matches no field is an error. The
// consumer built with the oncegate_faults tag adds the names of its fault
// switches (faults.Env: ONCEGATE_CRASH_AT and the others); other builds
// refuse them, so a switch set on a production binary is an error rather
// than silently ignored.
var EnvAllowlist = []string{
	"ONCEGATE_NATS_PASSWORD", // the NATS password, read when connecting; never in the file
	"ONCEGATE_NATS_TOKEN",    // the NATS token, read when connecting; never in the file
	"ONCEGATE_CONSOLE_TOKEN", // the console's token, read when it starts; never in the file
	"ONCEGATE_CONFIG",        // the configuration file's path, read by cmd/consumer
}

func envAllowed(name string) bool {
	for _, a := range EnvAllowlist {
		if p, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(name, p) || a == name {
			return true
		}
	}
	return false
}

// envToken turns a key or a name into its environment-variable spelling:
// upper case, every byte other than a letter or digit an underscore.
func envToken(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, ch := range b {
		if !('A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// EnvName returns the environment variable that overrides the field at
// path, a path as FieldError spells it: EnvName("llm.cache.ttl") is
// ONCEGATE_LLM_CACHE_TTL, EnvName("pipelines[alerts].ack_wait") is
// ONCEGATE_PIPELINES_ALERTS_ACK_WAIT.
func EnvName(path string) string {
	path = strings.NewReplacer("[", ".", "]", "").Replace(path)
	return EnvPrefix + envToken(path)
}

// LoadEnv overrides fields with the ONCEGATE_* variables of environ (in the
// form of os.Environ), then fills in the defaults of the fields still unset
// (so that a derived default, like the embedded store directory under
// data_dir, follows an overridden value).
//
// Every scalar field has a variable: ONCEGATE_ and its path in upper snake
// case (see EnvName). ONCEGATE_NATS_URL, ONCEGATE_LLM_CACHE_TTL; a
// pipeline's fields by its name, upper-cased with '-' as '_':
// ONCEGATE_PIPELINES_ALERTS_ACK_WAIT; map entries by key, for the keys the
// file has: ONCEGATE_LLM_PRICES_GPT_4O_MINI_PROMPT_PER_MTOK. A list takes
// comma-separated values (ONCEGATE_STREAM_SUBJECTS=a.>,b.>). Values are
// parsed as in the file: durations as "30s", sizes as "1MiB". An empty
// value sets the field to empty, which for metrics.listen disables the
// endpoint. Variables cannot add pipelines, map entries or a step the file
// does not have.
//
// NATS_URL, NATS_CREDS and NATS_NKEY, as the nats CLI reads them, set
// nats.url, nats.creds_file and nats.nkey_seed_file when neither the file nor an
// ONCEGATE_* variable does.
//
// An ONCEGATE_* variable that matches no field, and is not in
// EnvAllowlist, is an error (ErrUnknownKey), as is a value that does not
// parse (ErrInvalid). LoadEnv does not validate; call Validate.
func (c *Config) LoadEnv(environ []string) error {
	if c.meta == nil {
		c.meta = newMeta("")
	}
	c.applyDefaults() // materialize the default maps, so their entries have variables
	idx := c.envIndex()
	var issues []issue
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || envAllowed(name) {
			continue
		}
		switch ls := idx[name]; len(ls) {
		case 0:
			issues = append(issues, issue{env: name, err: unknown("matches no configuration field%s", suggestEnv(name, idx))})
		case 1:
			if err := ls[0].set(val); err != nil {
				issues = append(issues, issue{path: ls[0].path, env: name, err: err})
				continue
			}
			c.meta.setByEnv(ls[0].path, name)
		default:
			paths := make([]string, len(ls))
			for i, l := range ls {
				paths[i] = c.displayPath(l.path)
			}
			issues = append(issues, issue{env: name, err: invalid("ambiguous: it names %s; rename a pipeline to tell them apart", strings.Join(paths, " and "))})
		}
	}
	c.natsConventions(environ)
	c.applyDefaults()
	return c.fieldErrors(issues)
}

// natsConventions applies the variables the nats CLI and the NATS client
// libraries read (NATS_URL, NATS_CREDS, NATS_NKEY), with the lowest
// precedence: a field the file or an ONCEGATE_* variable sets keeps its
// value.
func (c *Config) natsConventions(environ []string) {
	fields := []struct {
		env, path string
		dst       *string
	}{
		{"NATS_URL", "nats.url", &c.NATS.URL},
		{"NATS_CREDS", "nats.creds_file", &c.NATS.CredsFile},
		{"NATS_NKEY", "nats.nkey_seed_file", &c.NATS.NKeySeedFile},
	}
	for _, f := range fields {
		if c.meta.present(f.path) || c.meta.env[f.path] != "" || *f.dst != "" {
			continue
		}
		for _, kv := range environ {
			if name, val, ok := strings.Cut(kv, "="); ok && name == f.env && val != "" {
				*f.dst = val
				c.meta.setByEnv(f.path, name)
			}
		}
	}
}

// leaf is one overridable field.
type leaf struct {
	path string // internal path
	set  func(string) error
}

// envIndex maps every variable name to the fields it would set (more than
// one if pipeline names make two spellings collide).
func (c *Config) envIndex() map[string][]leaf {
	idx := map[string][]leaf{}
	var walk func(path, env string, v reflect.Value, commit func() error)
	walk = func(path, env string, v reflect.Value, commit func() error) {
		add := func(set func(string) error) {
			idx[env] = append(idx[env], leaf{path: path, set: func(s string) error {
				if err := set(s); err != nil {
					return err
				}
				return commit()
			}})
		}
		t := v.Type()
		switch {
		case t == durationType, reflect.PointerTo(t).Implements(textUnmarshalerType):
			add(func(s string) error { return setText(v, s) })
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			fields := yamlFields(t)
			for _, name := range slices.Sorted(mapKeys(fields)) {
				walk(joinPath(path, name), env+"_"+envToken(name), v.Field(fields[name]), commit)
			}
		case reflect.Pointer:
			if t.Elem().Kind() != reflect.Struct {
				add(func(s string) error { return setText(v, s) })
				return
			}
			if v.IsNil() {
				absent := path
				walk(path, env, reflect.New(t.Elem()).Elem(), func() error {
					return invalid("%s is not configured; an environment variable can change it, not add it", c.displayPath(absent))
				})
				return
			}
			walk(path, env, v.Elem(), commit)
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Struct {
				for i := range v.Len() {
					el := v.Index(i)
					name := el.FieldByName("Name").String()
					if name == "" {
						continue
					}
					walk(indexPath(path, i), env+"_"+envToken(name), el, commit)
				}
				return
			}
			add(func(s string) error { return setList(v, s) })
		case reflect.Map:
			for _, k := range v.MapKeys() {
				key := k.String()
				kenv := env + "_" + envToken(key)
				kpath := keyPath(path, key)
				if t.Elem().Kind() == reflect.Struct {
					el := reflect.New(t.Elem()).Elem()
					el.Set(v.MapIndex(k))
					walk(kpath, kenv, el, func() error {
						v.SetMapIndex(k, el)
						return commit()
					})
					continue
				}
				el := reflect.New(t.Elem()).Elem()
				idx[kenv] = append(idx[kenv], leaf{path: kpath, set: func(s string) error {
					if err := setText(el, s); err != nil {
						return err
					}
					v.SetMapIndex(k, el)
					return commit()
				}})
			}
		default:
			add(func(s string) error { return setText(v, s) })
		}
	}
	walk("", strings.TrimSuffix(EnvPrefix, "_"), reflect.ValueOf(c).Elem(), func() error { return nil })
	return idx
}

// setText parses s into v, as the file's scalars are parsed.
func setText(v reflect.Value, s string) error {
	t := v.Type()
	if t == durationType {
		d, err := parseDuration(s)
		if err != nil {
			return invalid("%v", err)
		}
		v.SetInt(int64(d))
		return nil
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return invalid("%v", err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if s == "" {
			v.SetZero()
			return nil
		}
		p := reflect.New(t.Elem())
		if err := setText(p.Elem(), s); err != nil {
			return err
		}
		v.Set(p)
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(s), "_", ""), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return invalid("want a whole number, got %q", s)
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return invalid("want a finite number, got %q", s)
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return invalid("want true or false, got %q", s)
		}
		v.SetBool(b)
	default:
		panic("config: cannot set " + t.String() + " from text")
	}
	return nil
}

// setList parses s, comma-separated values, into the slice v. An empty s
// is an empty list.
func setList(v reflect.Value, s string) error {
	var parts []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		v.SetZero()
		return nil
	}
	l := reflect.MakeSlice(v.Type(), len(parts), len(parts))
	for i, p := range parts {
		if err := setText(l.Index(i), p); err != nil {
			return fmt.Errorf("item %d: %w", i+1, err)
		}
	}
	v.Set(l)
	return nil
}

func suggestEnv(name string, idx map[string][]leaf) string {
	best, bestDist := "", 4
	for _, cand := range slices.Sorted(mapKeys(idx)) {
		if d := editDistance(name, cand); d < bestDist {
			best, bestDist = cand, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}
