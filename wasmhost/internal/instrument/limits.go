package instrument

// maxLocals bounds a function's locals (wazero allocates them up front; a
// 4-byte declaration can ask for 2^32). Other runtimes use the same bound.
const maxLocals = 50000

// maxTotalLocals bounds the locals of all functions together, for the
// same reason (a Go guest of 2 MB declares a few hundred thousand).
const maxTotalLocals = 4 << 20

// Limits bound a module's structure, so that what wazero spends compiling
// and instantiating it is bounded whatever the binary (a few MB of deeply
// nested blocks, a huge br_table or one huge function compile for minutes
// otherwise). Rewrite refuses a module over them, naming the limit.
type Limits struct {
	// TableElements bounds the elements of all tables together: the
	// declared minimums must fit, and each table's maximum is lowered so
	// that the maximums sum to at most TableElements, which bounds
	// table.grow (wazero keeps 8 bytes per element).
	TableElements uint32
	// Functions bounds the functions a module defines.
	Functions int
	// FunctionBytes bounds one function body (locals and code), in bytes.
	FunctionBytes int
	// Nesting bounds how deep blocks, loops and ifs nest in a function.
	Nesting int
	// BrTableTargets bounds the targets of one br_table.
	BrTableTargets int
	// FunctionCost and ModuleCost bound the estimated compile cost of one
	// function and of all of them: a body byte costs 1, a br_table target
	// BlockCost, and a block, loop or if BlockCost plus its depth/16
	// (measured with wazero 1.12's compiler, a byte of straight-line code
	// takes about 0.4 µs to compile, a br_table target about 10 µs, a block
	// 16 µs at depth 256 and 30 µs at depth 1024).
	FunctionCost, ModuleCost int64
	// StackUnits bounds the call stack: a function that makes calls adds
	// its frame's weight (1 + its params and locals/4 + its body bytes/4096,
	// in units of about 64 bytes of wazero's stack) while it runs, and a
	// call that would pass StackUnits traps (setting StackGlobal).
	StackUnits uint32
	// Types, Imports, Globals, Exports, ElementSegments, ElementItems (of
	// all element segments) and DataSegments bound how many of each a
	// module declares: wazero's decoder keeps a structure for each, from
	// about 50 bytes (a data segment) to about 480 (a type), so that a
	// module of a few MB of minimal entries would cost it gigabytes.
	Types, Imports, Globals, Exports int
	ElementSegments, ElementItems    int
	DataSegments                     int
}

// BlockCost is what a block, loop, if or br_table target adds to the
// compile cost of Limits.FunctionCost and ModuleCost.
const BlockCost = 40

// DefaultLimits are the limits of Rewrite. A standard Go guest of 3 MB
// (examples/log-normalize) has tables of 6,012 elements, 1,916 functions,
// 1.8 MB of code, a largest body of 29 KB, blocks nested 549 deep, 57,417
// blocks, br_tables of up to 895 targets and 64,481 in all: a cost of
// about 7M, 0.1M for its costliest function.
var DefaultLimits = Limits{
	TableElements:  1 << 20,
	Functions:      100_000,
	FunctionBytes:  512 << 10,
	Nesting:        1024,
	BrTableTargets: 4096,
	FunctionCost:   2_000_000,
	ModuleCost:     32_000_000,
	StackUnits:     1 << 16,

	// The Go guest: 15 types, 17 imports, 8 globals, 6 exports, 1 element
	// segment of 1,930 items, 33,273 data segments. At the limits, wazero
	// holds at most about 75 MB for any of them.
	Types:           100_000,
	Imports:         10_000,
	Globals:         100_000,
	Exports:         100_000,
	ElementSegments: 100_000,
	ElementItems:    1 << 20,
	DataSegments:    1_000_000,
}

// Stats says what Rewrite changed.
type Stats struct {
	Functions  int  // function bodies rewritten
	Loops      int  // loop headers that got a check
	Entries    int  // function entries that got a check
	MemoryGrow int  // memory.grow instructions redirected
	Start      bool // the start section became the StartFunc export

	// What the module has, against Limits.
	TableElements    uint64 // the tables' declared minimums, summed
	MaxFunctionBytes int
	MaxNesting       int
	MaxBrTable       int
	Blocks           int   // blocks, loops and ifs
	BrTableTargets   int   // of all br_tables
	CodeBytes        int   // of all function bodies
	Cost             int64 // estimated compile cost (see Limits.ModuleCost)
	MaxFunctionCost  int64

	blockTypes [][]byte // result types of the multi-value depth blocks, as added types
}
