// kvcheck: checks histories of the kv store (apps/kv, include/dfi/apps/kv/history.hpp) for
// linearizability with Porcupine (github.com/anishathalye/porcupine), partitioned by key.
//
//	kvcheck [-timeout 60s] FILE...
//
// Prints one line and exits 0 when the histories are linearizable, 1 when they are not (naming
// a key whose history is not), 2 when the check timed out or the input is malformed.
package main

import (
	"bufio"
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
		in := input{key: uint64(nums[1]), value: uint64(nums[2])}
		switch fields[1] {
		case "get":
			in.op = opGet
		case "put":
			in.op = opPut
		case "del":
			in.op = opDel
		default:
			return nil, fmt.Errorf("%s:%d: unknown op %q", path, line, fields[1])
		}
		out := output{value: uint64(nums[3])}
		ret := nums[5]
		if ret < 0 {
			if in.op == opGet {
				continue // a read with no answer constrains nothing
			}
			out.unknown = true
			ret = math.MaxInt64 // a write may take effect any time after its call
		}
		ops = append(ops, porcupine.Operation{
			ClientId: int(nums[0]), Input: in, Output: out, Call: nums[4], Return: ret,
		})
	}
	return ops, scanner.Err()
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
		ops, err := parse(path)
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
