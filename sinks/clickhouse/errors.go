package clickhouse

import (
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// PermanentError is an insert or schema error that retrying cannot fix:
// unknown table or column, a type the server does not accept, a value too
// large, failed authentication or missing rights. It surfaces from Table
// and from Run, which stops with it rather than retry forever or drop rows.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// ServerError is an exception ClickHouse reported over HTTP.
type ServerError struct {
	// Code is ClickHouse's error code (0 if the answer carried none).
	Code int
	// Status is the HTTP status.
	Status int
	// Message is the server's text, trimmed.
	Message string
}

func (e *ServerError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("HTTP %d: code %d: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

var codeRe = regexp.MustCompile(`Code: (\d+)`)

// newServerError reads the error code from the X-ClickHouse-Exception-Code
// header (newer servers) or the body ("Code: 60, e.displayText() = …" on
// 18.16, "Code: 60. DB::Exception: …" later).
func newServerError(status int, header string, body []byte) *ServerError {
	e := &ServerError{Status: status, Message: strings.TrimSpace(string(body))}
	if c, err := strconv.Atoi(strings.TrimSpace(header)); err == nil {
		e.Code = c
	} else if m := codeRe.FindSubmatch(body); m != nil {
		e.Code, _ = strconv.Atoi(string(m[1]))
	}
	if len(e.Message) > 2000 {
		e.Message = e.Message[:2000] + "…"
	}
	return e
}

// permanentCodes are server errors caused by the data, the schema, the
// statement or the credentials: the same insert would fail again.
var permanentCodes = map[proto.Error]bool{
	// The table or a column is not there, or not what the block says.
	proto.ErrUnknownTable: true, proto.ErrUnknownDatabase: true, proto.ErrNoSuchColumnInTable: true,
	proto.ErrThereIsNoColumn: true, proto.ErrUnknownIdentifier: true, proto.ErrDuplicateColumn: true,
	proto.ErrNumberOfColumnsDoesntMatch: true, proto.ErrEmptyListOfColumnsPassed: true,
	proto.ErrTableIsDropped: true,
	// Type mismatch: the block cannot be converted to the table's types.
	proto.ErrTypeMismatch: true, proto.ErrIllegalColumn: true, proto.ErrIllegalTypeOfArgument: true,
	proto.ErrCannotConvertType: true, proto.ErrUnknownType: true,
	proto.ErrCannotInsertNullInOrdinaryColumn: true, proto.ErrValueIsOutOfRangeOfDataType: true,
	proto.ErrSizesOfColumnsDoesntMatch: true, proto.ErrIncorrectData: true, proto.ErrBadCast: true,
	proto.ErrCannotParseText: true, proto.ErrCannotParseNumber: true, proto.ErrCannotParseDate: true,
	proto.ErrCannotParseDatetime: true, proto.ErrCannotParseUUID: true,
	// Servers that convert a block's column to the table's type on insert
	// (not 18.16) fail a conversion that cannot work with these.
	proto.ErrCannotReadArrayFromText: true, proto.ErrCannotReadMapFromText: true,
	proto.ErrCannotParseInputAssertionFailed: true, proto.ErrCannotParseQuotedString: true,
	proto.ErrCannotParseEscapeSequence: true, proto.ErrCannotParseBool: true,
	proto.ErrCannotParseIpv4: true, proto.ErrCannotParseIpv6: true,
	proto.ErrCannotParseDomainValueFromString: true,
	// Too large: a value or block beyond the server's limits.
	proto.ErrTooLargeStringSize: true, proto.ErrTooLargeArraySize: true, proto.ErrTooLargeSizeCompressed: true,
	// Statement errors are sluice bugs: retrying will not fix them.
	proto.ErrSyntaxError: true, proto.ErrUnknownSetting: true, proto.ErrUnknownFormat: true,
	// Authentication and rights.
	proto.ErrDatabaseAccessDenied: true, proto.ErrAuthenticationFailed: true, proto.ErrUnknownUser: true,
	proto.ErrRequiredPassword: true, proto.ErrWrongPassword: true, proto.ErrReadonly: true,
	proto.ErrIPAddressNotAllowed: true, proto.ErrAccessDenied: true,
}

// classify wraps permanent errors in *PermanentError and returns the rest
// unchanged; those are retried. TABLE_IS_READ_ONLY (a replica that lost
// ZooKeeper), TOO_MANY_PARTS, timeouts, network errors and a server that is
// shutting down are retryable. MEMORY_LIMIT_EXCEEDED is permanent only when
// it is the query's own limit: the same insert would exceed it again.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var perm *PermanentError
	if errors.As(err, &perm) {
		return err
	}
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		badCert   x509.CertificateInvalidError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &badCert) {
		// A server whose certificate does not verify will not start to.
		return &PermanentError{Err: err}
	}
	code, msg := errorCode(err)
	switch {
	case code == 0:
		var se *ServerError
		if errors.As(err, &se) {
			// No ClickHouse code: a proxy or the wrong port. Auth and
			// missing paths will not go away by themselves.
			switch se.Status {
			case 400, 401, 403, 404, 405, 413:
				return &PermanentError{Err: err}
			}
		}
		return err
	case permanentCodes[proto.Error(code)]:
		return &PermanentError{Err: err}
	case proto.Error(code) == proto.ErrMemoryLimitExceeded && strings.Contains(msg, "(for query)"):
		return &PermanentError{Err: fmt.Errorf("%w (lower clickhouse.max_insert_bytes or raise max_memory_usage)", err)}
	}
	return err
}

// errorCode returns the ClickHouse error code and message carried by err,
// from either transport.
func errorCode(err error) (int, string) {
	if exc, ok := ch.AsException(err); ok {
		return int(exc.Code), exc.Message
	}
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code, se.Message
	}
	return 0, ""
}
