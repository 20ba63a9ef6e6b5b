/*
 * sensor.h: what the parts of the C sensor-batch module share: a batch's
 * header and events as the decoders hand them to the transform, the
 * per-record error message and the decoders' entry points.
 */
#ifndef SENSOR_H
#define SENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Bytes that alias the record or a decoder's buffer. */
typedef struct {
	const uint8_t *p;
	size_t n;
} span;

typedef struct {
	int64_t batch_id;
	span sensor, region; /* region is empty when null */
	int64_t batch_ts_ms, send_ts_us;
} header;

typedef struct {
	int32_t seq;
	span name, unit;
	int64_t value;
	int quality_null;
	double quality;
	size_t ntags, tags_cap;
	span *tags; /* grown as needed, reused from event to event */
} event;

/* The error message of the record at hand, built by msg_* in a buffer
 * longer than the host keeps of a message (4096 bytes), so that a long
 * message reaches the dead-letter topic cut where the Go module's is. */
extern char msg[];
extern size_t msg_len;
void msg_reset(void);
void msg_str(const char *s);
void msg_bytes(const uint8_t *p, size_t n);
void msg_int(int64_t v);

/* add_tag appends a tag to e, growing its array; nonzero when out of memory. */
int add_tag(event *e, const uint8_t *p, size_t n);

/* A decoder: reset decodes a record's framing and header into h (0, or -1
 * with the error in msg); next decodes the next event into e (1, or 0 at
 * the end of the events or on an error); failed reports whether the record
 * failed, the message in msg. */
typedef struct {
	int (*reset)(const uint8_t *p, size_t len, header *h);
	int (*next)(event *e);
	int (*failed)(void);
} decoder_ops;

/* Confluent-framed Avro SensorBatch (avro.c), the Go module's decoder rule
 * for rule. */
extern const decoder_ops avro_decoder;

/* The JSON form of a SensorBatch (json.c), the rules of the Go module
 * examples/sensor-batch-json (its package jsonbatch). */
extern const decoder_ops json_decoder;

#endif
