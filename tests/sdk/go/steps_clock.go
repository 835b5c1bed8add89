package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// clockLockLost: a message received in peek-lock, then the namespace's clock moved five
// minutes on over HTTP (POST /$sbctl/clock, daemon/README.md §31): the lock is lost at once,
// so the SDK's renew and complete fail with its lock-lost error and the message comes
// back with delivery count 2. Run alone (GO_STEPS), on a namespace of its own: moving the
// clock would disturb the other steps. SBCTL_CLOCK_URL and SBCTL_SAS_TOKEN say where and how.
func clockLockLost(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-clock", text("for five minutes"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := advanceClock(ctx, `{"advance": "5m"}`); err != nil {
		return nil, err
	}
	renewErr := r.RenewMessageLock(ctx, m, nil)
	completeErr := r.CompleteMessage(ctx, m, nil)
	again, err := completeRedelivery(ctx, r)
	if err != nil {
		return nil, err
	}
	return result{"renew_code": code(renewErr), "complete_code": code(completeErr),
		"delivery_count_again": again.DeliveryCount}, nil
}

func advanceClock(ctx context.Context, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("SBCTL_CLOCK_URL"),
		strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", os.Getenv("SBCTL_SAS_TOKEN"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("clock: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("clock: HTTP %d", resp.StatusCode)
	}
	return nil
}
