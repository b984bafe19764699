// kvcheck: checks histories of the kv store (apps/kv, include/dfi/apps/kv/history.hpp) for
// linearizability with Porcupine (github.com/anishathalye/porcupine), partitioned by key.
//
//	kvcheck [-timeout 60s] FILE...
//
// A FILE ending in .journal is a client thread's journal (binary, as the clients write it);
// any other FILE is the text form, one operation per line.
//
// Prints one line and exits 0 when the histories are linearizable, 1 when they are not (naming
// a key whose history is not), 2 when the check timed out or the input is malformed.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type opKind int

const (
	opGet opKind = iota
	opPut
	opDel
)

type input struct {
	op    opKind
	key   uint64
	value uint64 // put: the id written
}

type output struct {
	value   uint64 // get: the id read (0: not found); del: 1 when the key existed
	unknown bool   // the client never learned the outcome
}

// The sequential specification of one key: its state is the id of the value it holds (0: none).
var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[uint64][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(input).key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]uint64, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return uint64(0) },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		s := state.(uint64)
		i := in.(input)
		o := out.(output)
		switch i.op {
		case opGet:
			return o.unknown || o.value == s, s
		case opPut:
			return true, i.value
		default:
			existed := uint64(0)
			if s != 0 {
				existed = 1
			}
			return o.unknown || o.value == existed, uint64(0)
		}
	},
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		o := out.(output)
		switch i.op {
		case opGet:
			return fmt.Sprintf("get(%d) -> %d", i.key, o.value)
		case opPut:
			return fmt.Sprintf("put(%d, %d)", i.key, i.value)
		default:
			return fmt.Sprintf("del(%d) -> %d", i.key, o.value)
		}
	},
}

func parse(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []porcupine.Operation
	scanner := bufio.NewScanner(f)
	line := 0
	for scanner.Scan() {
		line++
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 7 {
			return nil, fmt.Errorf("%s:%d: want 7 fields, got %d", path, line, len(fields))
		}
		var nums [6]int64
		for i, at := range []int{0, 2, 3, 4, 5, 6} {
			v, err := strconv.ParseInt(fields[at], 10, 64)
			if err != nil {
				u, uerr := strconv.ParseUint(fields[at], 10, 64)
				if uerr != nil {
					return nil, fmt.Errorf("%s:%d: field %d: %v", path, line, at+1, err)
				}
				v = int64(u)
			}
			nums[i] = v
		}
		var kind opKind
		switch fields[1] {
		case "get":
			kind = opGet
		case "put":
			kind = opPut
		case "del":
			kind = opDel
		default:
			return nil, fmt.Errorf("%s:%d: unknown op %q", path, line, fields[1])
		}
		if op, ok := operation(uint64(nums[0]), uint64(nums[1]), uint64(nums[2]), uint64(nums[3]), kind, nums[4], nums[5]); ok {
			ops = append(ops, op)
		}
	}
	return ops, scanner.Err()
}

// operation turns one recorded operation into Porcupine's form; ok is false for one that
// constrains nothing (a read with no answer).
func operation(client, key, value, out uint64, op opKind, call, ret int64) (porcupine.Operation, bool) {
	o := output{value: out}
	if ret < 0 {
		if op == opGet {
			return porcupine.Operation{}, false
		}
		o.unknown = true
		ret = math.MaxInt64 // a write may take effect any time after its call
	}
	return porcupine.Operation{
		ClientId: int(client), Input: input{op: op, key: key, value: value}, Output: o, Call: call, Return: ret,
	}, true
}

const (
	journalHeader = 64
	journalRecord = 56
)

// parseJournal reads a client thread's journal (history.hpp): records up to the first unused one.
func parseJournal(path string) ([]porcupine.Operation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < journalHeader || !bytes.Equal(data[:8], []byte("DFIKVJ01")) {
		return nil, fmt.Errorf("%s: not a kv history journal (no DFIKVJ01 header)", path)
	}
	if size := binary.LittleEndian.Uint32(data[8:12]); size != journalRecord {
		return nil, fmt.Errorf("%s: records of %d bytes, want %d", path, size, journalRecord)
	}
	var ops []porcupine.Operation
	for at := journalHeader; at+journalRecord <= len(data); at += journalRecord {
		r := data[at : at+journalRecord]
		u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(r[off : off+8]) }
		state := binary.LittleEndian.Uint32(r[12:16])
		if state == 0 {
			break
		}
		if state > 2 {
			return nil, fmt.Errorf("%s: record %d: state %d", path, (at-journalHeader)/journalRecord, state)
		}
		kind := binary.LittleEndian.Uint32(r[8:12])
		if kind < 1 || kind > 3 {
			return nil, fmt.Errorf("%s: record %d: unknown op %d", path, (at-journalHeader)/journalRecord, kind)
		}
		ret := int64(u64(48))
		if state == 1 {
			ret = -1
		}
		if op, ok := operation(u64(0), u64(16), u64(24), u64(32), opKind(kind-1), int64(u64(40)), ret); ok {
			ops = append(ops, op)
		}
	}
	return ops, nil
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long (exit 2)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kvcheck [-timeout D] FILE...")
		os.Exit(2)
	}
	var history []porcupine.Operation
	for _, path := range flag.Args() {
		parseFile := parse
		if strings.HasSuffix(path, ".journal") {
			parseFile = parseJournal
		}
		ops, err := parseFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvcheck:", err)
			os.Exit(2)
		}
		history = append(history, ops...)
	}
	keys := map[uint64]bool{}
	for _, op := range history {
		keys[op.Input.(input).key] = true
	}
	result, info := porcupine.CheckOperationsVerbose(model, history, *timeout)
	switch result {
	case porcupine.Ok:
		fmt.Printf("kvcheck: %d operations on %d keys: linearizable\n", len(history), len(keys))
	case porcupine.Illegal:
		fmt.Printf("kvcheck: %d operations on %d keys: NOT linearizable\n", len(history), len(keys))
		for _, partial := range info.PartialLinearizationsOperations() {
			for _, lin := range partial {
				if len(lin) > 0 {
					fmt.Printf("kvcheck: longest linearizable prefix of key %d ends with %s\n",
						lin[0].Input.(input).key, model.DescribeOperation(lin[len(lin)-1].Input, lin[len(lin)-1].Output))
				}
				break
			}
			break
		}
		os.Exit(1)
	default:
		fmt.Printf("kvcheck: %d operations on %d keys: unknown (timed out after %v)\n", len(history), len(keys), *timeout)
		os.Exit(2)
	}
}
