package debeziumtest_test

import (
	"os"
	"testing"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
)

// One Postgres and one broker for the package's tests: each test works in
// its own database, slot and topic.
var (
	sharedPG    pgtest.Shared
	sharedKafka kafkatest.Shared
)

func TestMain(m *testing.M) {
	code := m.Run()
	_ = sharedKafka.Close()
	_ = sharedPG.Close()
	os.Exit(code)
}
