package schemareg

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/registrytest"
)

// TestApicurioIDsAreContentIDs: the schema id Apicurio's Confluent API
// serves, which walbox writes, is the artifact's contentId, not its
// globalId: the reason walbox's Debezium mode requires Apicurio's converter
// to run with apicurio.registry.use-id=contentId. The same schema under two
// subjects has one contentId and two globalIds.
func TestApicurioIDsAreContentIDs(t *testing.T) {
	fulltest.Require(t, "starts Apicurio Registry")
	reg := registrytest.Start(t)
	ctx := context.Background()
	admin, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	const schema = `{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}`
	// Another schema first, so that ids of the two kinds part.
	if _, err := admin.CreateSchema(ctx, "first-value", sr.Schema{Schema: `"string"`}); err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, subject := range []string{"a-value", "b-value"} {
		ss, err := admin.CreateSchema(ctx, subject, sr.Schema{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ss.ID)
	}
	native := strings.TrimSuffix(reg.URL, "/apis/ccompat/v7") + "/apis/registry/v2"
	meta := func(artifact string) (global, content int) {
		t.Helper()
		resp, err := http.Get(native + "/groups/default/artifacts/" + artifact + "/meta")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			GlobalID  int `json:"globalId"`
			ContentID int `json:"contentId"`
		}
		if resp.StatusCode != 200 {
			t.Fatalf("meta of %s: HTTP %d", artifact, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m.GlobalID, m.ContentID
	}
	ga, ca := meta("a-value")
	gb, cb := meta("b-value")
	t.Logf("Confluent ids %v; a-value globalId %d contentId %d; b-value globalId %d contentId %d", ids, ga, ca, gb, cb)
	if ca != cb || ga == gb {
		t.Fatalf("the same content under two artifacts: contentIds %d, %d and globalIds %d, %d; want one contentId and two globalIds", ca, cb, ga, gb)
	}
	for i, id := range ids {
		if id != ca {
			t.Errorf("subject %d: Confluent id %d, want the contentId %d (globalIds %d, %d)", i, id, ca, ga, gb)
		}
	}
}
