// Every K/V storage, one line each (core/storage_info.h): the id of its `StorageInfo`, defined as
// `<id>_storage_info` in src/core/<id>_storage.cc. Included with SQUEEZEKV_STORAGE defined.
SQUEEZEKV_STORAGE(rows)
SQUEEZEKV_STORAGE(kivi)
