/* offsets.h - per-partition tracking of messages in flight, so that jobs may
 * finish in any order while the committed offset only ever covers messages
 * that are all done ("no gap below it").
 *
 * Every tracked partition has an epoch; a job remembers the epoch it was
 * received in, and completions from an older epoch (the partition was
 * revoked meanwhile) are ignored. */
#ifndef RETORT_OFFSETS_H
#define RETORT_OFFSETS_H

#include <stddef.h>
#include <stdint.h>

typedef struct offsets offsets;

offsets *offsets_new(void);
void offsets_free(offsets *o); /* accepts NULL */

/* Registers a received message.  Offsets of one partition arrive in
 * increasing order, as Kafka delivers them, unless the consumer was moved
 * back (auto.offset.reset after the log was truncated under it, a topic
 * deleted and made again): an offset at or below one still tracked starts
 * a new epoch, and the entries at or above it go stale, as if revoked
 * (their messages come again); the entries below it stay tracked in
 * their own epoch, and nothing is committed past them until they are
 * done (their messages do not come again).  *rewound_from (may be NULL;
 * else -1 when not moved back) gets the highest offset tracked until
 * then.  (Appended to the old entries, it broke their order, and the
 * partition stored no offset again until revoked.)  Returns the epoch of
 * the entry, or 0 on allocation failure. */
uint64_t offsets_add(offsets *o, int32_t partition, int64_t offset, int64_t *rewound_from);

/* Marks a message done (epoch: what offsets_add returned for it).  Returns
 * 1 and sets *commit (the next offset to consume, i.e. what to store) when
 * the committable position advanced; 0 when it did not; -1 when the
 * message is not tracked in that epoch (stale: revoked, moved back). */
int offsets_done(offsets *o, int32_t partition, uint64_t epoch, int64_t offset, int64_t *commit);

/* Forgets a partition (revoked).  Its outstanding jobs become stale. */
void offsets_drop(offsets *o, int32_t partition);
void offsets_drop_all(offsets *o);

/* Messages received and not yet done, over all partitions. */
size_t offsets_pending(const offsets *o);

#endif
