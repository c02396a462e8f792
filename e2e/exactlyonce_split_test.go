package e2e

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// eosResumeSplitLog is what walbox logs when it resumes inside a Postgres
// transaction whose first part is committed in Kafka.
const eosResumeSplitLog = "resuming inside a postgres transaction split across kafka transactions"

// TestExactlyOnceSurvivesSIGKILLsInsideSplitTransactions is the SIGKILL
// run with Kafka transactions split every 7 records
// (WALBOX_TRANSACTION_SPLIT_RECORDS), so that most of the writer's 1 to
// 40-row Postgres transactions are committed in several parts and the
// kills (at random, and at each phase of a Kafka transaction) fall between
// two parts of one: every successor must skip exactly the committed parts.
// A read_committed consumer must hold every event once, in order.
func TestExactlyOnceSurvivesSIGKILLsInsideSplitTransactions(t *testing.T) {
	fulltest.Require(t, "20 SIGKILLs with Postgres transactions split across Kafka transactions; the short run splits on kfake and real Postgres in pipeline")
	logs := exactlyOnceSIGKILLs(t, "walbox-state.eos-kill-split", []string{"WALBOX_TRANSACTION_SPLIT_RECORDS=7"}, 20)
	resumed := 0
	for _, l := range logs {
		if strings.Contains(l, eosResumeSplitLog) {
			resumed++
		}
	}
	t.Logf("%d of %d processes resumed inside a split postgres transaction", resumed, len(logs))
	if resumed == 0 {
		t.Errorf("no process logged %q: the kills never fell between two parts of a split transaction", eosResumeSplitLog)
	}
}
