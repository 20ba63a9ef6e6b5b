/*
 * module.c: the sluice glue of the C log-normalize module: the schema check
 * and the row writing, as examples/log-normalize/main.go does them. The
 * parsing and templating are in normalize.c.
 */
#include "normalize.h"
#include "sluice.h"

/* The columns of the logs table (examples/log-normalize/schema.sql), in
 * order. ClickHouse exposes attrs Nested(key String, value String) as the
 * two arrays. */
static const sluice_column columns[] = {
	{"ts", "DateTime"},
	{"service", "LowCardinality(String)"},
	{"level", "LowCardinality(String)"},
	{"template", "String"},
	{"fingerprint", "UInt64"},
	{"msg", "String"},
	{"attrs.key", "Array(String)"},
	{"attrs.value", "Array(String)"},
};

static sluice_table logs;
static ln_entry entry; /* reused for every record */

/* The target table is "logs" unless the module parameter "table" names
 * another; a schema that differs from schema.sql is refused. */
int sluice_module_init(sluice_config *cfg) {
	char name[256] = "logs";
	sluice_bytes p;
	if (sluice_param(cfg, "table", &p)) {
		if (p.len >= sizeof name)
			return sluice_refuse(cfg, "log-normalize: the table parameter is too long");
		memcpy(name, p.ptr, p.len);
		name[p.len] = 0;
	}
	if (sluice_find_table(cfg, name, &logs) != 0)
		return -1;
	if (sluice_table_expect(cfg, &logs, columns, sizeof columns / sizeof columns[0]) != 0)
		return sluice_refuse_context(cfg, "log-normalize needs the table of examples/log-normalize/schema.sql");
	return 0;
}

/* One row per log line; a line that is not a JSON object with a msg, or
 * whose ts is not valid, is dead-lettered with the reason. */
int sluice_module_record(const sluice_record *rec, sluice_out *out) {
	ln_entry *e = &entry;
	if (ln_normalize(rec->value.ptr, rec->value.len, rec->timestamp, e) != 0)
		return sluice_fail_bytes(out, e->err, e->err_len);
	if (e->time < 0 || e->time > (int64_t)UINT32_MAX) {
		char d[24];
		int i = sizeof d;
		uint64_t u = e->time < 0 ? -(uint64_t)e->time : (uint64_t)e->time;
		do {
			d[--i] = (char)('0' + u % 10);
			u /= 10;
		} while (u);
		if (e->time < 0)
			d[--i] = '-';
		sluice_fail_begin(out);
		sluice_fail_append(out, "ts ", 3);
		sluice_fail_append(out, d + i, sizeof d - (size_t)i);
		sluice_fail_append(out, " is outside the range of DateTime (1970 to 2106)", 48);
		return sluice_fail_end(out);
	}
	sluice_row_begin(out, &logs);
	sluice_put_datetime(out, (uint32_t)e->time);
	sluice_put_string(out, e->service.p, e->service.n);
	sluice_put_string(out, e->level.p, e->level.n);
	sluice_put_string(out, e->template_.p, e->template_.n);
	sluice_put_u64(out, e->fingerprint);
	sluice_put_string(out, e->msg.p, e->msg.n);
	sluice_put_array(out, e->nattrs);
	for (size_t i = 0; i < e->nattrs; i++)
		sluice_put_string(out, e->attrs[i].key.p, e->attrs[i].key.n);
	sluice_put_array(out, e->nattrs);
	for (size_t i = 0; i < e->nattrs; i++)
		sluice_put_string(out, e->attrs[i].value.p, e->attrs[i].value.n);
	return sluice_row_end(out);
}
