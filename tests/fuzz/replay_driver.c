/* replay_driver.c - runs a libFuzzer target over every file in a corpus
 * directory, so the corpus is a regression test in plain `make test`. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int main(int argc, char **argv);

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    DIR *d = opendir(argv[1]);
    if (!d) { fprintf(stderr, "%s: no corpus at %s\n", argv[0], argv[1]); return 1; }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *fp = fopen(path, "rb");
        if (!fp) continue;
        fseek(fp, 0, SEEK_END);
        long len = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        if (!buf || fread(buf, 1, (size_t)len, fp) != (size_t)len) { fclose(fp); free(buf); return 1; }
        fclose(fp);
        LLVMFuzzerTestOneInput(buf, (size_t)len);
        free(buf);
        n++;
    }
    closedir(d);
    printf("%s: replayed %d corpus inputs\n", argv[0], n);
    return 0;
}
