package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/internal/chsql"
	"github.com/sluicehq/sluice/internal/chtype"
	"github.com/sluicehq/sluice/internal/chtype/chvalue"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

const moduleUsage = `Usage:
  sluice module test -module m.wasm -input records.jsonl -table 'CREATE TABLE …' [-table …] [-param k=v …]
  sluice module inspect m.wasm
  sluice module init [-sdk DIR] go|rust|c|ts DIR
  sluice module push|ls|activate|rollback|rm …   (a server's admin API; see below)

test runs a module offline, the way the pipeline would, on records read from
a JSON-lines file (- for standard input): a line {"value": …, "key": …,
"headers": {…}, "timestamp": ms, "offset": n} (value required, no other
fields) is a Kafka record; any other line is taken whole as a record's value.
Each -table is the CREATE TABLE statement of a target table, in the order the
pipeline lists them. For each record it prints its input line number and its
rows, one line each as "table {column: value, …}", or "error: why", or
"(no rows)" for a record the module filtered out.

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

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func cmdModuleTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("module test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modulePath := fs.String("module", "", "the module (.wasm)")
	inputPath := fs.String("input", "", "records, one JSON line each (- for standard input)")
	var tables, params repeated
	fs.Var(&tables, "table", "CREATE TABLE statement of a target table (repeatable, in pipeline order)")
	fs.Var(&params, "param", "module parameter key=value (repeatable)")
	batchSize := fs.Int("batch", 100, "records per batch")
	topic := fs.String("topic", "test", "topic the records come from")
	timestamp := fs.Int64("timestamp", 0, "Kafka timestamp (ms since the epoch) of records that give none; 0: now")
	deadline := fs.Duration("deadline", wasmhost.DefaultDeadline, "per-batch deadline")
	memory := fs.Uint64("memory", wasmhost.DefaultMemoryBytes, "memory cap of the module, bytes")
	logLevel := fs.String("log-level", "error", "least level of the module's log lines to show on standard error (its stderr is warn, its stdout info)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *modulePath == "" || *inputPath == "" || len(tables) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sluice module test: -module, -input and at least one -table are required")
		return 2
	}
	if *batchSize < 1 {
		fmt.Fprintln(stderr, "sluice module test: -batch must be at least 1")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice module test:", err)
		return 1
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return fail(err)
	}
	initCfg := wasmhost.InitConfig{Params: map[string]string{}}
	var blocks []*clickhouse.Block
	var printers []*rowPrinter
	for _, ddl := range tables {
		name, cols, err := parseCreateTable(ddl)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		t, err := clickhouse.NewTable("default", name, cols)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		p, err := newRowPrinter(name, t.Insert)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		ts := wasmhost.TableSchema{Name: name}
		for _, c := range t.Insert {
			ts.Columns = append(ts.Columns, wasmhost.ColumnSchema{Name: c.Name, Type: c.Type})
		}
		initCfg.Tables = append(initCfg.Tables, ts)
		blocks = append(blocks, t.NewBlock())
		printers = append(printers, p)
	}
	for _, kv := range params {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fail(fmt.Errorf("-param %q: want key=value", kv))
		}
		initCfg.Params[k] = v
	}
	if *timestamp == 0 {
		*timestamp = time.Now().UnixMilli()
	}
	recs, lines, err := readRecords(*inputPath, *timestamp)
	if err != nil {
		return fail(err)
	}
	wasm, err := os.ReadFile(*modulePath)
	if err != nil {
		return fail(err)
	}

	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: log,
		Limits: wasmhost.Limits{MemoryBytes: *memory, Deadline: *deadline}})
	if err != nil {
		return fail(err)
	}
	defer rt.Close(ctx)
	mod, err := rt.Load(ctx, *modulePath, wasm)
	if err != nil {
		return fail(err)
	}
	r := &moduleRunner{mod: mod, init: initCfg, blocks: blocks, printers: printers, out: bufio.NewWriter(stdout)}
	defer r.out.Flush()
	if r.inst, err = mod.Instantiate(ctx, initCfg); err != nil {
		return fail(err)
	}
	defer func() { r.inst.Close(ctx) }()
	for start := 0; start < len(recs); start += *batchSize {
		end := min(start+*batchSize, len(recs))
		b := &wasmhost.Batch{Topic: *topic, Records: recs[start:end]}
		if err := r.run(ctx, b, lines[start:end]); err != nil {
			return fail(err)
		}
	}
	return 0
}

// moduleRunner runs batches through an instance and prints the results.
type moduleRunner struct {
	mod      *wasmhost.Module
	init     wasmhost.InitConfig
	inst     *wasmhost.Instance
	blocks   []*clickhouse.Block
	printers []*rowPrinter
	out      *bufio.Writer
}

// run transforms one batch. When the instance fails, it runs the batch's
// records again one by one on fresh instances, as the pipeline isolates the
// records that fail on their own, and reports the failure on those.
func (r *moduleRunner) run(ctx context.Context, b *wasmhost.Batch, lines []int) error {
	out, err := r.inst.Transform(ctx, b)
	if err == nil {
		for i := 0; ; i++ {
			res, ok := out.Next()
			if !ok {
				return nil
			}
			r.print(lines[i], &res)
		}
	}
	var trap *wasmhost.TrapError
	if !errors.As(err, &trap) {
		return err
	}
	if err := r.restart(ctx); err != nil {
		return err
	}
	if len(b.Records) == 1 {
		fmt.Fprintf(r.out, "%d: error: %s\n", lines[0], indentLines(trap.Err.Error()))
		return nil
	}
	for i := range b.Records {
		one := &wasmhost.Batch{Topic: b.Topic, Partition: b.Partition, Records: b.Records[i : i+1]}
		if err := r.run(ctx, one, lines[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (r *moduleRunner) restart(ctx context.Context) error {
	_ = r.inst.Close(ctx)
	inst, err := r.mod.Instantiate(ctx, r.init)
	if err != nil {
		return err
	}
	r.inst = inst
	return nil
}

// print writes one record's result. Its rows are checked with the sink's
// decoder, as the pipeline does: a row that does not decode fails the
// record.
func (r *moduleRunner) print(line int, res *wasmhost.RecordResult) {
	if res.Err != "" {
		fmt.Fprintf(r.out, "%d: error: %s\n", line, indentLines(res.Err))
		return
	}
	if res.Rows() == 0 {
		fmt.Fprintf(r.out, "%d: (no rows)\n", line)
		return
	}
	var text []string
	for {
		table, row, ok := res.NextRow()
		if !ok {
			break
		}
		if table >= len(r.blocks) {
			fmt.Fprintf(r.out, "%d: error: row for table index %d; the module has %d tables\n", line, table, len(r.blocks))
			return
		}
		err := r.blocks[table].AppendRow(row)
		r.blocks[table].Reset()
		if err != nil {
			fmt.Fprintf(r.out, "%d: error: %v\n", line, err)
			return
		}
		s, err := r.printers[table].format(row)
		if err != nil {
			fmt.Fprintf(r.out, "%d: error: %v\n", line, err)
			return
		}
		text = append(text, s)
	}
	for _, s := range text {
		fmt.Fprintf(r.out, "%d: %s\n", line, s)
	}
}

// readRecords reads the JSON-lines input: a record envelope per line, or
// any other line as a record's value. It returns the records and their
// line numbers (1-based). Blank lines are skipped.
func readRecords(path string, defaultTs int64) ([]wasmhost.Record, []int, error) {
	var f io.Reader = os.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer file.Close()
		f = file
	}
	recs, lines, err := wasmhost.ReadRecordsJSONL(f, defaultTs)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return recs, lines, nil
}

func cmdModuleInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("module inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "sluice module inspect: want one module file")
		return 2
	}
	path := fs.Arg(0)
	wasm, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	defer rt.Close(ctx)
	info, err := rt.Inspect(ctx, path, wasm)
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "module:      %s\n", path)
	fmt.Fprintf(w, "size:        %d bytes\n", info.Size)
	fmt.Fprintf(w, "sha256:      %s\n", info.SHA256)
	if info.ABIVersion != 0 {
		fmt.Fprintf(w, "abi version: %d\n", info.ABIVersion)
	} else {
		fmt.Fprintf(w, "abi version: unknown (the module does not load)\n")
	}
	fmt.Fprintf(w, "imports:\n")
	for _, s := range info.Imports {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "exports:\n")
	for _, s := range info.Exports {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "tables:      not in the binary: the host declares the target tables at init, and the module accepts or refuses them\n")
	if info.LoadErr != nil {
		fmt.Fprintf(w, "load:        refused: %v\n", info.LoadErr)
		return 1
	}
	fmt.Fprintf(w, "load:        ok with the default limits\n")
	return 0
}

// parseCreateTable reads enough of a CREATE TABLE statement to give the
// table's name and columns: names, types and default kinds. A Nested(a T,
// b U) column n becomes n.a Array(T) and n.b Array(U), as ClickHouse stores
// it. Indexes, constraints and projections are skipped.
func parseCreateTable(ddl string) (string, []clickhouse.Column, error) {
	ddl = stripComments(ddl)
	s := &ddlScanner{s: ddl}
	for _, kw := range []string{"CREATE", "TABLE"} {
		if !s.keyword(kw) {
			return "", nil, fmt.Errorf("%q: want CREATE TABLE", abbreviate(ddl))
		}
	}
	if s.keyword("IF") {
		if !s.keyword("NOT") || !s.keyword("EXISTS") {
			return "", nil, fmt.Errorf("%q: want IF NOT EXISTS", abbreviate(ddl))
		}
	}
	name := s.ident()
	if s.peek() == '.' { // database.table: the table is the second part
		s.pos++
		name = s.ident()
	}
	if name == "" {
		return "", nil, fmt.Errorf("%q: no table name", abbreviate(ddl))
	}
	if s.peek() != '(' {
		return "", nil, fmt.Errorf("table %s: want a column list in parentheses", name)
	}
	body, ok := s.balanced()
	if !ok {
		return "", nil, fmt.Errorf("table %s: unbalanced parentheses or quotes", name)
	}
	var cols []clickhouse.Column
	for _, def := range chsql.SplitTopLevel(body[1 : len(body)-1]) {
		c := &ddlScanner{s: def}
		switch strings.ToUpper(c.word()) {
		case "INDEX", "CONSTRAINT", "PROJECTION", "PRIMARY":
			continue
		}
		c = &ddlScanner{s: def}
		colName := c.ident()
		if colName == "" {
			return "", nil, fmt.Errorf("table %s: no column name in %q", name, def)
		}
		typ, ok := c.typeExpr()
		if !ok || typ == "" {
			return "", nil, fmt.Errorf("table %s column %s: no type", name, colName)
		}
		kind := ""
		switch k := strings.ToUpper(c.word()); k {
		case "DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL":
			kind = k
		}
		if inner, ok := strings.CutPrefix(typ, "Nested("); ok {
			for _, field := range chsql.SplitTopLevel(strings.TrimSuffix(inner, ")")) {
				f := &ddlScanner{s: field}
				fname := f.ident()
				ftyp, ok := f.typeExpr()
				if fname == "" || !ok || ftyp == "" {
					return "", nil, fmt.Errorf("table %s column %s: bad Nested field %q", name, colName, field)
				}
				cols = append(cols, clickhouse.Column{Name: colName + "." + fname, Type: "Array(" + ftyp + ")", DefaultKind: kind})
			}
			continue
		}
		cols = append(cols, clickhouse.Column{Name: colName, Type: typ, DefaultKind: kind})
	}
	if len(cols) == 0 {
		return "", nil, fmt.Errorf("table %s has no columns", name)
	}
	return name, cols, nil
}

// stripComments removes -- and /* */ comments outside quotes.
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '`' || c == '"':
			end := chsql.QuoteEnd(s, i)
			if end < 0 {
				end = len(s)
			}
			b.WriteString(s[i:end])
			i = end - 1
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += 2 + end + 1
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ddlScanner reads the parts of a CREATE TABLE statement parseCreateTable
// needs.
type ddlScanner struct {
	s   string
	pos int
}

func (d *ddlScanner) skipSpace() {
	for d.pos < len(d.s) && unicode.IsSpace(rune(d.s[d.pos])) {
		d.pos++
	}
}

func (d *ddlScanner) peek() byte {
	d.skipSpace()
	if d.pos < len(d.s) {
		return d.s[d.pos]
	}
	return 0
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// word reads a bare word.
func (d *ddlScanner) word() string {
	d.skipSpace()
	start := d.pos
	for d.pos < len(d.s) && isIdentByte(d.s[d.pos]) {
		d.pos++
	}
	return d.s[start:d.pos]
}

// keyword reads kw, case-insensitively, if it comes next.
func (d *ddlScanner) keyword(kw string) bool {
	save := d.pos
	if strings.EqualFold(d.word(), kw) {
		return true
	}
	d.pos = save
	return false
}

// ident reads a bare, `backquoted` or "double-quoted" identifier.
func (d *ddlScanner) ident() string {
	switch d.peek() {
	case '`', '"':
		text, end := chsql.Unquote(d.s, d.pos)
		if end < 0 {
			d.pos = len(d.s)
			return ""
		}
		d.pos = end
		return text
	}
	return d.word()
}

// balanced reads from an opening parenthesis to its closing one, skipping
// quoted strings and identifiers.
func (d *ddlScanner) balanced() (string, bool) {
	start := d.pos
	depth := 0
	for d.pos < len(d.s) {
		switch c := d.s[d.pos]; c {
		case '\'', '`', '"':
			end := chsql.QuoteEnd(d.s, d.pos)
			if end < 0 {
				return "", false
			}
			d.pos = end
			continue
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				d.pos++
				return d.s[start:d.pos], true
			}
		}
		d.pos++
	}
	return "", false
}

// typeExpr reads a type: a name and, if a parenthesis follows, its
// balanced arguments; it returns the type as ClickHouse spells it (one
// space after each comma, spaces around =, none elsewhere but between
// words).
func (d *ddlScanner) typeExpr() (string, bool) {
	name := d.word()
	if name == "" {
		return "", false
	}
	if d.peek() != '(' {
		return name, true
	}
	args, ok := d.balanced()
	if !ok {
		return "", false
	}
	return name + normalizeType(args), true
}

// normalizeType respells a type's argument list as ClickHouse does.
func normalizeType(s string) string {
	var b strings.Builder
	lastWord := false // the last byte written ends a word
	pendingSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '`' || c == '"':
			end := chsql.QuoteEnd(s, i)
			if end < 0 {
				end = len(s)
			}
			if pendingSpace && lastWord {
				b.WriteByte(' ')
			}
			b.WriteString(s[i:end])
			i = end - 1
			lastWord, pendingSpace = true, false
		case unicode.IsSpace(rune(c)):
			pendingSpace = true
		case c == ',':
			b.WriteString(", ")
			lastWord, pendingSpace = false, false
		case c == '=':
			b.WriteString(" = ")
			lastWord, pendingSpace = false, false
		default:
			if pendingSpace && lastWord && isIdentByte(c) {
				b.WriteByte(' ')
			}
			b.WriteByte(c)
			lastWord, pendingSpace = isIdentByte(c), false
		}
	}
	return strings.ReplaceAll(strings.ReplaceAll(b.String(), ",  ", ", "), "=  ", "= ")
}

// rowPrinter renders RowBinary rows of a table as JSON objects. Its
// buffer and encoder are reused from row to row.
type rowPrinter struct {
	table string
	names []string
	keys  []string // the names as JSON, `"name": `
	cols  []*chtype.Type
	buf   bytes.Buffer
	enc   *json.Encoder // writes to buf, without escaping <, > and & (not HTML)
}

func newRowPrinter(table string, cols []clickhouse.Column) (*rowPrinter, error) {
	p := &rowPrinter{table: table}
	p.enc = json.NewEncoder(&p.buf)
	p.enc.SetEscapeHTML(false)
	for _, c := range cols {
		t, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		p.buf.Reset()
		if err := p.encode(c.Name); err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		p.names = append(p.names, c.Name)
		p.keys = append(p.keys, p.buf.String()+": ")
		p.cols = append(p.cols, t)
	}
	return p, nil
}

// encode appends v to the buffer as JSON.
func (p *rowPrinter) encode(v any) error {
	if err := p.enc.Encode(v); err != nil {
		return err
	}
	p.buf.Truncate(p.buf.Len() - 1) // the newline Encode ends with
	return nil
}

// format renders one row as `table {"col": value, …}`.
func (p *rowPrinter) format(row []byte) (string, error) {
	p.buf.Reset()
	p.buf.WriteString(p.table)
	p.buf.WriteString(" {")
	rest := row
	for i, t := range p.cols {
		v, n, err := chvalue.Decode(t, rest)
		if err != nil {
			return "", fmt.Errorf("row for %s: column %s: %w", p.table, p.names[i], err)
		}
		rest = rest[n:]
		if i > 0 {
			p.buf.WriteString(", ")
		}
		p.buf.WriteString(p.keys[i])
		if err := p.encode(chvalue.JSON(t, v)); err != nil {
			return "", err
		}
	}
	if len(rest) != 0 {
		return "", fmt.Errorf("row for %s: %d bytes past the last column", p.table, len(rest))
	}
	p.buf.WriteString("}")
	return p.buf.String(), nil
}

// indentLines indents the lines after the first (a trap's wasm stack
// trace), so that every line that starts with a number starts a record.
func indentLines(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
