package sdk

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// gatewaySettings has a networked profile behind the egress gateway (its upstream resolver is
// never asked: nothing here connects; the rules' effect on connections is tested by the
// repository's jail_gateway tests) and one without.
const gatewaySettings = `
[sandbox]
default_profile = "gw"
[sandbox.jail.network]
upstream_dns = "192.0.2.53:53"
[sandbox.profiles.gw]
network_enabled = true
enabled_policies = []
[sandbox.profiles.gw.egress.gateway]
allow = ["api.test"]
[sandbox.profiles.plain]
enabled_policies = []
`

func TestSetEgressReplacesTheRulesOfALiveSandbox(t *testing.T) {
	settings := filepath.Join(t.TempDir(), "settings.toml")
	if err := os.WriteFile(settings, []byte(gatewaySettings), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", settings)
	c, err := NewClient(WithBaseURL(d.url), WithTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	sb := newSandbox(t, c, SandboxOptions{Profile: "gw"})
	want := GatewayRules{Allow: []string{"api.test", "*.pypi.org:443"}, Deny: []string{"bad.pypi.org"}}
	now, err := sb.SetEgress(ctx, want)
	if err != nil || !reflect.DeepEqual(*now, want) {
		t.Fatalf("%+v %v\n%s", now, err, d.log())
	}
	// Only a deny-list: Allow is sent (and comes back) empty.
	now, err = c.SetEgress(ctx, sb.ID(), GatewayRules{Deny: []string{"api.test"}})
	if err != nil || len(now.Allow) != 0 || !reflect.DeepEqual(now.Deny, []string{"api.test"}) {
		t.Fatalf("%+v %v", now, err)
	}
	var apiErr *APIError
	_, err = sb.SetEgress(ctx, GatewayRules{Allow: []string{"api.test:99999"}})
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "99999") {
		t.Fatalf("%v", err)
	}
	plain := newSandbox(t, c, SandboxOptions{Profile: "plain"})
	_, err = plain.SetEgress(ctx, want)
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != "invalid_request" || !strings.Contains(apiErr.Message, "egress") {
		t.Fatalf("%v", err)
	}
}
