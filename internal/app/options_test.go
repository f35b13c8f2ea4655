package app_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/natsrun"
)

// fillLeaves gives every string and integer field under v (a struct, its
// nested structs followed) a value of its own, and returns them by path
// ("TLS.CAFile").
func fillLeaves(t *testing.T, v reflect.Value, prefix string, got map[string]reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		path := prefix + sf.Name
		switch f.Kind() {
		case reflect.Struct:
			fillLeaves(t, f, path+".", got)
			continue
		case reflect.String:
			f.SetString(fmt.Sprintf("value-%d", len(got)+1))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(len(got)+1) * int64(time.Second))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		default:
			t.Fatalf("field %s is a %s: teach fillLeaves its kind", path, f.Kind())
		}
		got[path] = f
	}
}

// field returns the field of v at path ("TLS.CAFile").
func field(v reflect.Value, path string) (reflect.Value, bool) {
	for name := range strings.SplitSeq(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			return v, false
		}
	}
	return v, true
}

// sameValue reports whether a and b hold the same string, number or slice.
func sameValue(a, b reflect.Value) bool {
	switch {
	case a.Kind() == reflect.String && b.Kind() == reflect.String:
		return a.String() == b.String()
	case a.CanInt() && b.CanInt():
		return a.Int() == b.Int()
	case a.Kind() == reflect.Slice && b.Kind() == reflect.Slice:
		return a.Len() == b.Len() && (a.Len() == 0 || a.Index(0).Addr().Pointer() == b.Index(0).Addr().Pointer())
	}
	return false
}

// TestNATSOptionsCarryEveryField: every setting of the nats section
// reaches natsrun.Options under its own name (the embedded server's
// flattened), so that a field added to one and not the other fails here
// rather than being dropped on the way.
func TestNATSOptionsCarryEveryField(t *testing.T) {
	var n config.NATS
	set := map[string]reflect.Value{}
	fillLeaves(t, reflect.ValueOf(&n).Elem(), "", set)
	o := reflect.ValueOf(app.NATSOptions(n, "conn", nil))
	for path, want := range set {
		if path == "URL" { // Connect's argument, not an option
			continue
		}
		name := strings.TrimPrefix(path, "Embedded.")
		got, ok := field(o, name)
		if !ok {
			t.Errorf("config.NATS.%s has no natsrun.Options.%s", path, name)
			continue
		}
		if !sameValue(got, want) {
			t.Errorf("NATSOptions: %s = %v; want %v (config.NATS.%s)", name, got, want, path)
		}
	}
	if got := app.NATSOptions(n, "conn", nil).Name; got != "conn" {
		t.Errorf("NATSOptions(_, %q, nil).Name = %q", "conn", got)
	}
	always := config.NATS{Embedded: config.Embedded{SyncInterval: config.SyncAlways}}
	if got := app.NATSOptions(always, "", nil).SyncInterval; got != natsrun.SyncAlways {
		t.Errorf("NATSOptions(sync_interval always).SyncInterval = %v; want natsrun.SyncAlways", got)
	}
}

// TestIngressOptionsCarryEveryField: every setting of the ingress section
// reaches ingress.Options under its own name.
func TestIngressOptionsCarryEveryField(t *testing.T) {
	var in config.Ingress
	set := map[string]reflect.Value{}
	fillLeaves(t, reflect.ValueOf(&in).Elem(), "", set)
	o := reflect.ValueOf(app.IngressOptions(&in))
	for path, want := range set {
		got, ok := field(o, path)
		if !ok {
			t.Errorf("config.Ingress.%s has no ingress.Options.%s", path, path)
			continue
		}
		if !sameValue(got, want) {
			t.Errorf("IngressOptions: %s = %v; want %v", path, got, want)
		}
	}
}

// TestDefaultsAgree: the defaults the configuration fills in (and `config
// check` shows) are the ones natsrun and the ingress apply to a zero
// field, so that a caller of either package without a Config gets what a
// configuration file would have given.
func TestDefaultsAgree(t *testing.T) {
	for _, tt := range []struct {
		name        string
		config, pkg any
	}{
		{"nats.connect_timeout", config.DefaultConnectTimeout, natsrun.DefaultConnectTimeout},
		{"nats.embedded.listen", config.DefaultEmbeddedListen, natsrun.DefaultListen},
		{"nats.embedded.sync_interval", time.Duration(config.DefaultSyncInterval), natsrun.DefaultSyncInterval},
		{"ingress.max_body_bytes", int64(config.DefaultIngressMaxBody), int64(ingress.DefaultMaxBodyBytes)},
		{"ingress.tolerance", config.DefaultIngressTolerance, ingress.DefaultTolerance},
		{"ingress.publish_timeout", config.DefaultIngressPublishTimeout, ingress.DefaultPublishTimeout},
		{"ingress.retry_after", config.DefaultIngressRetryAfter, ingress.DefaultRetryAfter},
		{"ingress.read_header_timeout", config.DefaultIngressReadHeader, ingress.DefaultReadHeaderTimeout},
		{"ingress.read_timeout", config.DefaultIngressReadTimeout, ingress.DefaultReadTimeout},
		{"ingress.idle_timeout", config.DefaultIngressIdleTimeout, ingress.DefaultIdleTimeout},
		{"ingress.max_in_flight", config.DefaultIngressMaxInFlight, ingress.DefaultMaxInFlight},
	} {
		if tt.config != tt.pkg {
			t.Errorf("%s: the configuration's default is %v, the package's %v", tt.name, tt.config, tt.pkg)
		}
	}

	// What the configuration fills in, not only its constants.
	c := config.Default()
	o := app.NATSOptions(c.NATS, "", nil)
	if o.ConnectTimeout != natsrun.DefaultConnectTimeout || o.Listen != natsrun.DefaultListen || o.SyncInterval != natsrun.DefaultSyncInterval {
		t.Errorf("NATSOptions(config.Default().NATS) = timeout %v, listen %q, sync %v; want natsrun's defaults", o.ConnectTimeout, o.Listen, o.SyncInterval)
	}
	io := app.IngressOptions(&c.Ingress)
	if io.MaxBodyBytes != ingress.DefaultMaxBodyBytes || io.PublishTimeout != ingress.DefaultPublishTimeout || io.MaxInFlight != ingress.DefaultMaxInFlight ||
		io.ReadHeaderTimeout != ingress.DefaultReadHeaderTimeout || io.ReadTimeout != ingress.DefaultReadTimeout || io.IdleTimeout != ingress.DefaultIdleTimeout ||
		io.RetryAfter != ingress.DefaultRetryAfter {
		t.Errorf("IngressOptions(config.Default().Ingress) = body %d, publish %v, in flight %d, read header %v, read %v, idle %v, retry after %v; want the ingress's defaults",
			io.MaxBodyBytes, io.PublishTimeout, io.MaxInFlight, io.ReadHeaderTimeout, io.ReadTimeout, io.IdleTimeout, io.RetryAfter)
	}
}
