package fulltest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m, 3)) }
