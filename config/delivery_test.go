package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateDelivery: the exactly-once options are validated by the
// pipeline and reported under their own flags.
func TestValidateDelivery(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "exactly-once", mutate: func(c *Config) { c.Delivery = "exactly-once" }},
		{name: "unknown mode", mutate: func(c *Config) { c.Delivery = "at-most-once" },
			wantErr: []string{`invalid value "at-most-once" for --delivery (WALBOX_DELIVERY)`, "at-least-once, exactly-once"}},
		{name: "transactional id with spaces", mutate: func(c *Config) { c.TransactionalID = " walbox" },
			wantErr: []string{`invalid value " walbox" for --transactional-id (WALBOX_TRANSACTIONAL_ID)`}},
		{name: "max records zero", mutate: func(c *Config) { c.TransactionMaxRecords = 0 },
			wantErr: []string{`invalid value "0" for --transaction-max-records (WALBOX_TRANSACTION_MAX_RECORDS)`}},
		{name: "split records zero", mutate: func(c *Config) { c.TransactionSplitRecords = 0 },
			wantErr: []string{`invalid value "0" for --transaction-split-records (WALBOX_TRANSACTION_SPLIT_RECORDS)`}},
		{name: "max interval zero", mutate: func(c *Config) { c.TransactionMaxInterval = 0 },
			wantErr: []string{`invalid value "0s" for --transaction-max-interval (WALBOX_TRANSACTION_MAX_INTERVAL)`}},
		{name: "max interval set", mutate: func(c *Config) { c.TransactionMaxInterval = time.Second }},
		{name: "state topic empty", mutate: func(c *Config) { c.StateTopic = "" },
			wantErr: []string{`invalid value "" for --state-topic (WALBOX_STATE_TOPIC)`}},
		{name: "state topic invalid", mutate: func(c *Config) { c.StateTopic = "walbox state" },
			wantErr: []string{`invalid value "walbox state" for --state-topic (WALBOX_STATE_TOPIC)`, "letters, digits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}
