@QueueConsumer-0.3.0 @spec-validation
Feature: QueueConsumer 0.3.0 spec validation
  Every field is a required integer in an inclusive range except the two
  required references and the optional dead-letter reference; the spec and
  every reference object are closed.

  Background:
    Given a queue "q"
    And a queue "d"
    And a worker "w"

  @QC-INPUT-1 @QC-INPUT-7 @QC-INPUT-8 @QC-INPUT-9 @QC-INPUT-10 @QC-INPUT-11 @QC-CRUD-1
  Scenario Outline: a consumer setting at the edge of its range is accepted
    When I create a consumer "c" of "q" by "w" with <field>=<value>
    Then the request is accepted

    Examples:
      | field                  | value |
      | maxBatchSize           | 1     |
      | maxBatchSize           | 100   |
      | maxBatchTimeoutSeconds | 0     |
      | maxBatchTimeoutSeconds | 60    |
      | maxConcurrency         | 1     |
      | maxConcurrency         | 250   |
      | maxRetries             | 0     |
      | maxRetries             | 100   |
      | retryDelaySeconds      | 0     |
      | retryDelaySeconds      | 43200 |

  @QC-INPUT-1 @QC-INPUT-7 @QC-INPUT-8 @QC-INPUT-9 @QC-INPUT-10 @QC-INPUT-11 @QC-CRUD-2
  Scenario Outline: a consumer setting out of range or not an integer is invalid_spec
    When I create a consumer "c" of "q" by "w" with <field>=<value>
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/spec/<field>"
    And the listing holds exactly 0 resources named "c"

    Examples:
      | field                  | value |
      | maxBatchSize           | 0     |
      | maxBatchSize           | 101   |
      | maxBatchSize           | "5"   |
      | maxBatchSize           | 5.5   |
      | maxBatchSize           | 5.0   |
      | maxBatchTimeoutSeconds | -1    |
      | maxBatchTimeoutSeconds | 61    |
      | maxBatchTimeoutSeconds | "0"   |
      | maxConcurrency         | 0     |
      | maxConcurrency         | 251   |
      | maxConcurrency         | 1.0   |
      | maxRetries             | -1    |
      | maxRetries             | 101   |
      | maxRetries             | "3"   |
      | retryDelaySeconds      | -1    |
      | retryDelaySeconds      | 43201 |
      | retryDelaySeconds      | 30.5  |

  @QC-INPUT-5 @QC-INPUT-6 @QC-INPUT-7 @QC-INPUT-8 @QC-INPUT-9 @QC-INPUT-10 @QC-INPUT-11 @QC-DELIV-3
  Scenario Outline: every field but deadLetterQueue is required
    When I create a consumer "c" of "q" by "w" with -<field>
    Then the request is refused with 422 "invalid_spec"
    And the listing holds exactly 0 resources named "c"

    Examples:
      | field                  |
      | queue                  |
      | worker                 |
      | maxBatchSize           |
      | maxBatchTimeoutSeconds |
      | maxConcurrency         |
      | maxRetries             |
      | retryDelaySeconds      |

  @QC-INPUT-12
  Scenario: deadLetterQueue is optional and accepted when it names a queue
    When I create a consumer "c" of "q" by "w" with deadLetterQueue=@d
    Then the request is accepted

  @QC-INPUT-15 @QC-UNK-1 @QC-UNK-2
  Scenario: an unknown spec field is refused
    When I create a consumer "c" of "q" by "w" with batchSize=5
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/spec"
    And the listing holds exactly 0 resources named "c"

  @QC-UNK-1 @QC-UNK-2 @QC-UNK-3 @QC-OWN-2 @Q-REF-2
  Scenario Outline: a reference object holds resourceUid and nothing else
    When I create a consumer "c" of "q" by "w" with <field>=<value>
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/spec/<field>"

    Examples:
      | field           | value                                         |
      | queue           | {"resourceUid": "{{uid:q}}", "name": "q"}     |
      | worker          | {"resourceUid": "{{uid:w}}", "version": "v1"} |
      | deadLetterQueue | {"resourceUid": "{{uid:d}}", "space": "x"}    |
      | queue           | {}                                            |
      | queue           | "{{uid:q}}"                                   |
      | deadLetterQueue | null                                          |

  @QC-INPUT-13 @QC-INPUT-14
  Scenario: non-empty privateInputs are refused
    When I create a consumer "c" of "q" by "w" carrying privateInputs {"token": "x"}
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/privateInputs"
    And the listing holds exactly 0 resources named "c"

  @QC-CRUD-5 @QC-INPUT-4 @QC-INPUT-12
  Scenario: an update replaces the whole spec, and deadLetterQueue can be dropped
    Given a consumer "c" of "q" by "w" with deadLetterQueue=@d; maxRetries=3
    When I update "c" with -deadLetterQueue; maxRetries=1
    Then the request is accepted
    And the spec of "c" reads {"queue": {"resourceUid": "{{uid:q}}"}, "worker": {"resourceUid": "{{uid:w}}"}, "maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0}
    And "c" is at generation 2

  @QC-CRUD-7 @QC-INPUT-15 @QC-UNK-2
  Scenario: an invalid update is not applied
    Given a consumer "c" of "q" by "w" with maxRetries=3
    When I update "c" with maxRetries=101
    Then the request is refused with 422 "invalid_spec"
    And the spec of "c" reads {"queue": {"resourceUid": "{{uid:q}}"}, "worker": {"resourceUid": "{{uid:w}}"}, "maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 3, "retryDelaySeconds": 0}
    And "c" is at generation 1
