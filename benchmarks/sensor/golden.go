package sensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// GoldenBatches are the batches of the modules' golden test data
// (examples/sensor-batch/testdata): ten consecutive batches (null and
// non-null regions, 0 to 3 tags, both filters), a sensor wrap-around and a
// batch id with long varints.
var GoldenBatches = []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1023, 1024, 2_000_000_000_007}

// AppendFramed appends msg to a corpus file: its length as a little-endian
// u32, then its bytes.
func AppendFramed(dst, msg []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(dst, uint32(len(msg))), msg...)
}

// SplitFramed splits a corpus file into its messages (aliasing b).
func SplitFramed(b []byte) ([][]byte, error) {
	var msgs [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, errors.New("corpus: truncated length")
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, fmt.Errorf("corpus: message of %d bytes overruns the file", n)
		}
		msgs = append(msgs, b[4:4+n:4+n])
		b = b[4+n:]
	}
	return msgs, nil
}

// RowText renders a row as one tab-separated line, the format of the
// golden rows.txt: quality as NULL or Go's shortest float text, tags as
// ['a','b'].
func RowText(r *Row) string {
	q := "NULL"
	if !r.QualityNull {
		q = strconv.FormatFloat(r.Quality, 'g', -1, 64)
	}
	tags := make([]string, len(r.Tags))
	for i, t := range r.Tags {
		tags[i] = "'" + t + "'"
	}
	return strings.Join([]string{
		strconv.FormatUint(r.BatchID, 10), strconv.Itoa(int(r.EventSeq)), r.Sensor, r.Region, r.NameUpper, r.Unit,
		strconv.FormatInt(r.Value, 10), strconv.FormatInt(r.ValueScaled, 10), q, "[" + strings.Join(tags, ",") + "]",
		strconv.FormatUint(uint64(r.BatchTs), 10), strconv.Itoa(int(r.BatchTsMs)), strconv.FormatInt(r.SendTsUs, 10),
	}, "\t")
}

// GoldenRowsHeader is the first line of rows.txt.
const GoldenRowsHeader = "# batch_id\tevent_seq\tsensor\tregion\tname_upper\tunit\tvalue\tvalue_scaled\tquality\ttags\tbatch_ts\tbatch_ts_ms\tsend_ts_us"
