// Package ui tests the explorer web UI (cmd/internal/explorer) in a real browser:
// headless Chromium, driven from Go through the DevTools protocol with chromedp,
// against a real quorumbus node started by test/harness. The test runs only with
// QUORUMBUS_UI=1 (make ui-test installs Chromium when it is missing and sets it);
// QUORUMBUS_UI_CHROMIUM names another browser binary, and QUORUMBUS_UI_ARTIFACTS the
// directory that receives a screenshot of each main page (default: the test's
// temporary directory).
//
// It is a Go module of its own (go.mod here, with the product module replaced by ../..),
// so that chromedp stays out of the product's go.mod; `make lint` vets it.
package ui
