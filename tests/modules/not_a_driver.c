/* A shared object that is not a liboutbox driver: no entry symbol. */
int outbox_test_not_a_driver(void);
__attribute__((visibility("default"))) int outbox_test_not_a_driver(void)
{
    return 42;
}
