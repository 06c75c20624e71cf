package main

import (
	"fmt"
	"os"

	"github.com/quorumbus/quorumbus/cmd/internal/version"
)

func main() {
	cfg, err := loadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quorumbus:", err)
		os.Exit(2)
	}
	if cfg.showVersion {
		fmt.Println("quorumbus", version.Get())
		return
	}
	if cfg.checkOnly {
		b, err := cfg.effectiveJSON()
		if err != nil {
			fmt.Fprintln(os.Stderr, "quorumbus:", err)
			os.Exit(1)
		}
		fmt.Println(string(b))
		return
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "quorumbus:", err)
		os.Exit(1)
	}
}
