package main

import (
	"fmt"
	"io"
)

// moduleTestCommand and moduleTestDoc are what 'sluice module test -h'
// and 'sluice module' say of test.
const (
	moduleTestCommand = `sluice module test -module m.wasm -input records.jsonl -table 'CREATE TABLE …' [-table …] [-param k=v …]`
	moduleTestDoc     = `test runs a module offline, the way the pipeline would, on records read from
a JSON-lines file (- for standard input): a line {"value": …, "key": …,
"headers": {…}, "timestamp": ms, "offset": n} (value required, no other
fields) is a Kafka record; any other line is taken whole as a record's value.
Each -table is the CREATE TABLE statement of a target table, in the order the
pipeline lists them. For each record it prints its input line number and its
rows, one line each as "table {column: value, …}", or "error: why", or
"(no rows)" for a record the module filtered out.
`
)

const moduleUsage = `Usage:
  ` + moduleTestCommand + `
  sluice module inspect m.wasm
  sluice module init [-sdk DIR] go|rust|c|ts DIR
  sluice module push|ls|activate|rollback|rm …   (a server's admin API; see below)

` + moduleTestDoc + `
inspect prints a module's ABI version, sha256, size, imports and exports.

init writes a new module (source, build.sh, table.sql, sample input and a
test.sh that runs it through 'sluice module test'); see 'sluice module init -h'.

` + clientUsage

// cmdModule runs "sluice module …".
func cmdModule(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, moduleUsage)
		return 2
	}
	switch args[0] {
	case "test":
		return cmdModuleTest(args[1:], stdout, stderr)
	case "inspect":
		return cmdModuleInspect(args[1:], stdout, stderr)
	case "init":
		return cmdModuleInit(args[1:], stdout, stderr)
	case "push", "ls", "activate", "rollback", "rm":
		return cmdModuleClient(args[0], args[1:], stdout, stderr)
	}
	return helpOrUnknown("sluice module", args[0], moduleUsage, stdout, stderr)
}
