-- The Distributed tables over the shards' local tables, on the server sluice
-- reads the cluster from. Both shard by cityHash64(symbol), so a symbol's
-- quotes and its end-of-day row live on the same shard, and routing shards
-- (which computes the same hash) puts every row where these tables would.
CREATE TABLE quotes AS quotes_local
ENGINE = Distributed(quotes_cluster, default, quotes_local, cityHash64(symbol));

CREATE TABLE quotes_eod AS quotes_eod_local
ENGINE = Distributed(quotes_cluster, default, quotes_eod_local, cityHash64(symbol));
