package retention_test

import (
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

func atomicLoad(p *pglogrepl.LSN) uint64 { return atomic.LoadUint64((*uint64)(p)) }

func atomicStore(p *pglogrepl.LSN, v pglogrepl.LSN) { atomic.StoreUint64((*uint64)(p), uint64(v)) }
