/* dsq_version.h - one version for the library, the CLIs and the files they write. */
#ifndef DSQ_VERSION_H
#define DSQ_VERSION_H
#define DSQ_VERSION_MAJOR 0
#define DSQ_VERSION_MINOR 1
#define DSQ_VERSION_PATCH 0
#define DSQ_VERSION_STRING "0.1.0"
#endif
