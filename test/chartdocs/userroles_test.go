//go:build chart

package chartdocs

import (
	"context"

	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/test/helmbin"
)

// userRolesHeader is the header of the table of docs/security.md of the ClusterRoles
// the chart aggregates into Kubernetes' view, edit and admin.
var userRolesHeader = []string{"ClusterRole", "aggregated to", "resource", "verbs"}

// aggregateLabels are the labels that aggregate a ClusterRole into the
// user-facing ones, by the role's name in the table.
var aggregateLabels = map[string]string{
	"rbac.authorization.k8s.io/aggregate-to-view":  "view",
	"rbac.authorization.k8s.io/aggregate-to-edit":  "edit",
	"rbac.authorization.k8s.io/aggregate-to-admin": "admin",
}

// userGrant is one verb on one resource in one aggregated role.
type userGrant struct {
	role, aggregatedTo, resource, verb string
}

// readmeUserRoles parses the table of docs/security.md with userRolesHeader.
func readmeUserRoles(t *testing.T, readme string) map[userGrant]int {
	t.Helper()
	out := map[userGrant]int{}
	lines := strings.Split(readme, "\n")
	tables := 0
	for i := 0; i < len(lines); i++ {
		if !slices.Equal(splitRow(strings.TrimSpace(lines[i])), userRolesHeader) {
			continue
		}
		tables++
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := splitRow(strings.TrimSpace(lines[i]))
			if len(cells) != len(userRolesHeader) {
				t.Errorf(rbacDoc+":%d: want %d cells, got %d", i+1, len(userRolesHeader), len(cells))
				continue
			}
			role := strings.Trim(cells[0], "`")
			var to []string
			for _, r := range strings.Split(cells[1], ",") {
				to = append(to, strings.TrimSpace(r))
			}
			sort.Strings(to)
			for _, res := range backticked.FindAllStringSubmatch(cells[2], -1) {
				for _, v := range strings.Split(cells[3], ",") {
					out[userGrant{role: role, aggregatedTo: strings.Join(to, ","), resource: res[1], verb: strings.TrimSpace(v)}] = i + 1
				}
			}
		}
	}
	if tables != 1 {
		t.Errorf(rbacDoc+": want exactly one table with the header | %s |, found %d", strings.Join(userRolesHeader, " | "), tables)
	}
	return out
}

// TestUserRolesTable renders chart/templates/aggregate-roles.yaml and checks
// that the table of docs/security.md states exactly its ClusterRoles: the roles each
// is aggregated into, resources and verbs. And what the table promises
// besides: namespace users may write PlacementPolicies (edit, admin), and
// no aggregated role writes a ClusterPlacementPolicy or reaches past view
// with one.
func TestUserRolesTable(t *testing.T) {
	helm, err := helmbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, helm, "template", rbacRelease, filepath.Join(repoRoot(t), "chart"), "-n", rbacNamespace,
		"--kube-version", "1.36.0", "--show-only", "templates/aggregate-roles.yaml", "--set", imageRepositoryFlag).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	rendered := map[userGrant]bool{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" {
			continue
		}
		var to []string
		for label, name := range aggregateLabels {
			if role.Labels[label] == "true" {
				to = append(to, name)
			}
		}
		sort.Strings(to)
		perms, problems := rulePermissions("cluster", role.Rules)
		for _, p := range problems {
			t.Error(p)
		}
		for _, p := range perms {
			if p.names != "" {
				t.Errorf("%s: a rule limited to names %s", role.Name, p.names)
			}
			rendered[userGrant{role: role.Name, aggregatedTo: strings.Join(to, ","), resource: p.resource, verb: p.verb}] = true
		}
	}
	stated := readmeUserRoles(t, string(read(t, rbacDoc)))
	for g := range rendered {
		if _, ok := stated[g]; !ok {
			t.Errorf("aggregate-roles.yaml grants %s on %s in %s (aggregated to %s), and the table of docs/security.md has no row for it", g.verb, g.resource, g.role, g.aggregatedTo)
		}
	}
	for g, line := range stated {
		if !rendered[g] {
			t.Errorf(rbacDoc+":%d: says %s on %s in %s (aggregated to %s), but aggregate-roles.yaml has no such rule", line, g.verb, g.resource, g.role, g.aggregatedTo)
		}
	}
	writes := map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}
	var editWrites bool
	for g := range rendered {
		if strings.HasPrefix(g.resource, "clusterplacementpolicies.") && (writes[g.verb] || g.aggregatedTo != "view") {
			t.Errorf("%s: %s on %s aggregated to %s: cluster policies are for cluster admins, readable with view only", g.role, g.verb, g.resource, g.aggregatedTo)
		}
		if g.resource == "placementpolicies.apportion.dev" && g.verb == "create" && strings.Contains(g.aggregatedTo, "edit") && strings.Contains(g.aggregatedTo, "admin") {
			editWrites = true
		}
	}
	if !editWrites {
		t.Error("no role aggregated to edit and admin creates placementpolicies: namespace users cannot manage their own")
	}
}
