@QueueConsumer-0.3.0 @dead-letter-cycles
Feature: The dead-letter graph has no cycle
  A dead-letter queue never leads back to a queue it drains from, through
  any number of consumers; creates and updates that would close a cycle are
  refused.

  Background:
    Given a queue "q1"
    And a queue "q2"
    And a queue "q3"
    And a worker "w"

  @QC-DELIV-34 @QC-OWN-4 @QC-CRUD-1 @QC-CRUD-2
  Scenario: a consumer whose dead-letter queue is its own queue is refused
    When I create a consumer "c1" of "q1" by "w" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"
    And the listing holds exactly 0 resources named "c1"

  @QC-DELIV-34 @QC-OWN-4
  Scenario: a cycle of length 2 is refused on create
    Given a consumer "c1" of "q1" by "w" with deadLetterQueue=@q2
    When I create a consumer "c2" of "q2" by "w" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"
    And the listing holds exactly 0 resources named "c2"

  @QC-DELIV-34 @QC-OWN-4
  Scenario: a cycle of length 3 is refused on create
    Given a consumer "c1" of "q1" by "w" with deadLetterQueue=@q2
    And a consumer "c2" of "q2" by "w" with deadLetterQueue=@q3
    When I create a consumer "c3" of "q3" by "w" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"

  @QC-DELIV-34 @QC-OWN-4 @QC-CRUD-7
  Scenario: a cycle of length 3 is refused on update, and the consumer keeps its settings
    Given a consumer "c1" of "q1" by "w" with deadLetterQueue=@q2
    And a consumer "c2" of "q2" by "w" with deadLetterQueue=@q3
    And a consumer "c3" of "q3" by "w"
    When I update "c3" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"
    And "c3" is at generation 1

  @QC-DELIV-34 @QC-OWN-4 @QC-CRUD-7
  Scenario: a cycle of length 2 is refused on update, and the consumer keeps its settings
    Given a consumer "c1" of "q1" by "w" with deadLetterQueue=@q2
    And a consumer "c2" of "q2" by "w"
    When I update "c2" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"
    And "c2" is at generation 1

  @QC-DELIV-34 @QC-OWN-4
  Scenario: a self-reference is refused on update
    Given a consumer "c1" of "q1" by "w"
    When I update "c1" with deadLetterQueue=@q1
    Then the request is refused with 422 "dead_letter_cycle"

  @QC-DELIV-34
  Scenario: a chain without a cycle is accepted
    Given a consumer "c1" of "q1" by "w" with deadLetterQueue=@q2
    When I create a consumer "c2" of "q2" by "w" with deadLetterQueue=@q3
    Then the request is accepted
