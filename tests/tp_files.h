/* Temp plugin folders for the registry tests: copies of the crafted plugins built in
 * tests/plugins/ (tp-*.so) plus hand-made bad files. */
#ifndef RLX_TP_FILES_H
#define RLX_TP_FILES_H

/* A fresh temp folder (mode 0700) holding a copy of each tests/plugins/.libs/NAME.so
 * for the NULL-terminated names; aborts the test on failure. Free with tu_rmrf + free. */
char *tp_dir(const char *const *names);
/* Copies tests/plugins/.libs/NAME.so into dir as file_name (NULL: NAME.so). */
void tp_copy(const char *name, const char *dir, const char *file_name);
/* Writes len bytes of data to dir/file_name. */
void tp_write(const char *dir, const char *file_name, const void *data, unsigned long len);
#endif
