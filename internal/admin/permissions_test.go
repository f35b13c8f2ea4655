package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/natstest"
)

const deploymentConfig = `
data_dir: %s
metrics: {listen: ""}
nats: {url: "%s", user: oncegate, password_file: %s}
ledger: {store: kv}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: http, url: "%s"}
`

// TestServiceNeedsPermission: in a deployment, the service answers whoever
// may publish to its subjects; a user whose NATS permissions deny them
// gets no answer, while one they allow does.
func TestServiceNeedsPermission(t *testing.T) {
	srv := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "oncegate", Password: "p-consumer"},
			{Username: "operator", Password: "p-operator"},
			{Username: "viewer", Password: "p-viewer", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"oncegate.admin.>"}},
			}},
		}
	})
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("p-consumer"), 0o600); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(&receiver{byKey: map[string]int{}})
	defer hs.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, deploymentConfig, filepath.Join(dir, "data"), srv.ClientURL(), pw, hs.URL), "test")
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	prefix := admin.Prefix(cfg.Admin.Subject, cfg.Stream.Name)

	op, err := nats.Connect(srv.ClientURL(), nats.UserInfo("operator", "p-operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if h, err := admin.NewClient(op, prefix).Hello(ctx); err != nil || h.Stream != "ONCEGATE" {
		t.Fatalf("Hello as an allowed user = %+v, %v", h, err)
	}
	viewer, err := nats.Connect(srv.ClientURL(), nats.UserInfo("viewer", "p-viewer"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = admin.NewClient(viewer, prefix).Forget(vctx, admin.ForgetRequest{Key: "0123456789abcdef0123456789abcdef", By: admin.Caller{User: "viewer"}})
	if err == nil || errors.Is(err, admin.ErrRefused) || errors.Is(err, admin.ErrNotFound) || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		t.Errorf("Forget as a user denied the prefix: %v; want no answer from the service, and the server's permissions violation", err)
	}
}
